"""One chat setting for every Qwen analysis (vlbind.qwen.prompts.Chat): the text a tiny qwen3 model's template
renders in retrieval, binding and probes carries Qwen3's empty think block exactly when thinking is off."""

import pytest

from vlbind.qwen.binding import interchange, make_pairs
from vlbind.qwen.probes import QwenProbeConfig, probe_table
from vlbind.qwen.prompts import Chat, PromptConfig, prompts
from vlbind.qwen.retrieval import evaluate
from vlbind.qwen.tiny import tiny

NO_THINKING = "<|im_start|>assistant\n<think>\n\n</think>\n\n"


def rendered_by_every_analysis(chat: Chat) -> dict:
    model, tok = tiny("qwen3")
    seen, render = [], tok.apply_chat_template

    def recording(*args, **kwargs):
        seen.append(render(*args, **kwargs))
        return seen[-1]

    tok.apply_chat_template = recording
    out = {}
    evaluate(model, tok, prompts(PromptConfig(context_lengths=(2,), contexts_per_length=1), "indirect"), chat=chat,
             max_new_tokens=1, greedy=True)
    out["retrieval"], seen[:] = list(seen), []
    interchange(model, tok, make_pairs(4, 1, seed=0), chat)
    out["binding"], seen[:] = list(seen), []
    probe_table(model, tok, QwenProbeConfig(train_prompts=4, test_prompts=2, n_objects=3, folds=2), chat)
    out["probes"] = list(seen)
    return out


@pytest.mark.parametrize("thinking", [False, True])
def test_every_analysis_renders_the_same_thinking_setting(thinking):
    for analysis, texts in rendered_by_every_analysis(Chat(thinking=thinking)).items():
        assert texts, analysis
        assert all(t.endswith(NO_THINKING) != thinking for t in texts), analysis
        assert all(t.endswith("<|im_start|>assistant\n") == thinking for t in texts), analysis

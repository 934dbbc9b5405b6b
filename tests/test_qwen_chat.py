"""One chat setting for every Qwen analysis (vlbind.qwen.prompts.Chat): the text a tiny qwen3 model's template
renders in retrieval, binding and probes carries Qwen3's empty think block exactly when thinking is off. The
binding job renders Gur-Arieh et al.'s chat (binding.their_chat: no thinking flag), so Qwen3 and Qwen3-VL are
patched at the same token."""

import pandas as pd
import pytest

from vlbind.qwen.binding import BindingConfig, interchange, make_pairs, table1, their_chat
from vlbind.qwen.probes import QwenProbeConfig, probe_table
from vlbind.qwen.prompts import Chat, PromptConfig, prompts
from vlbind.qwen.retrieval import Generation, evaluate
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
             generation=Generation(max_new_tokens=1, greedy=True))
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


def test_the_binding_prompt_ends_at_the_assistant_turn_in_qwen3_and_qwen3_vl_and_table1_says_so():
    """Qwen3's template thinks by default, Qwen3-VL-Instruct's has no switch (the tiny stand-ins' templates do the
    same): without a flag both prompts end at `assistant\\n`, whatever qwen.chat.thinking says."""
    chat = their_chat(Chat(thinking=False), BindingConfig())
    assert chat.thinking is None and chat.system_prompt is None
    tables, patched = [], {}
    for model_type in ("qwen3", "qwen3_vl"):
        model, tok = tiny(model_type)
        rendered = chat.render(tok, "Which box is the key in?")
        assert rendered == "<|im_start|>user\nWhich box is the key in?<|im_end|>\n<|im_start|>assistant\n"
        t = interchange(model, tok, make_pairs(4, 2, seed=0), chat)
        patched[model_type] = set(t["patched_token"])
        assert patched[model_type] == {tok.convert_ids_to_tokens(tok.encode(rendered)[-1])}  # the prompt's last
        tables.append(t.assign(model=model_type, generation="Qwen3", kind="vlm" if "vl" in model_type else "llm",
                               dropped=0))
    assert patched["qwen3"] == patched["qwen3_vl"]
    t1 = table1(pd.concat(tables), BindingConfig(n_entries=4)).set_index("model")
    assert t1.loc["qwen3", "patched_token"] == t1.loc["qwen3_vl", "patched_token"] == repr(*patched["qwen3"])

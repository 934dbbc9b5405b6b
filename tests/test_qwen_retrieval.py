"""Retrieval evaluation of a pretrained model (vlbind.qwen.retrieval): scripted models that always / never answer
right score 1.0 / 0.0, and a tiny random Qwen model runs end to end."""

import re

import pandas as pd
import pytest
import torch
from test_qwen_prompts import parse

from vlbind.qwen.prompts import Chat, PromptConfig, prompts
from vlbind.qwen.retrieval import Generation, evaluate
from vlbind.qwen.tiny import tiny, tiny_tokenizer
from vlbind.qwen.words import CITIES

CFG = PromptConfig(context_lengths=(2, 5), contexts_per_length=2)


class Scripted:
    """Answers each prompt by parsing its text (right) or with another city (wrong), after a think block."""

    def __init__(self, tok, right: bool):
        self.tok, self.right = tok, right

    def generate(self, input_ids, attention_mask, **kwargs):
        rows = []
        for ids in input_ids:
            text = re.sub(r" ([.?,:])", r"\1", self.tok.decode(ids))  # the word-level tokenizer spaces punctuation
            city = parse(text.split("<|im_start|>user")[-1])
            if not self.right:
                city = next(c for c in CITIES if c != city)
            reply = f"<think> {CITIES[0] if city != CITIES[0] else CITIES[1]} </think> {city} ."
            rows.append(torch.cat([ids, torch.tensor(self.tok.encode(reply, add_special_tokens=False) +
                                                     [self.tok.eos_token_id])]))
        return torch.nn.utils.rnn.pad_sequence(rows, batch_first=True, padding_value=self.tok.pad_token_id)


@pytest.mark.parametrize("right", [True, False])
@pytest.mark.parametrize("task", ["direct", "indirect"])
def test_scripted_models_score_one_and_zero(task, right):
    tok = tiny_tokenizer()
    table = evaluate(Scripted(tok, right), tok, prompts(CFG, task), chat=Chat(),
                     generation=Generation(max_new_tokens=8, batch_size=3))
    assert len(table) == 2 * (2 + 5) and (table["correct"] == right).all()
    assert table["output"].str.contains("<think>").all()  # the think block reached scoring, and was skipped


def test_a_tiny_qwen_model_runs_end_to_end_and_greedy_is_deterministic():
    model, tok = tiny("qwen3_vl")
    ps = prompts(CFG, "indirect")[:5]
    a = evaluate(model, tok, ps, chat=Chat(), generation=Generation(max_new_tokens=3, greedy=True, batch_size=2))
    b = evaluate(model, tok, ps, chat=Chat(), generation=Generation(max_new_tokens=3, greedy=True, batch_size=5))
    assert list(a.columns) == ["task", "n_pairs", "context", "query_position", "answer", "output", "correct"]
    pd.testing.assert_frame_equal(a, b)  # left padding: the batch a prompt shares changes nothing
    assert (a["answer"] == [p.answer for p in ps]).all()


def test_a_sampled_answer_depends_on_its_prompt_and_the_seed_not_on_the_batch():
    """The paper config samples (greedy: false, the models' own settings): with one random stream per prompt the
    answers are the same at batch 1 and 8 (fp32), differ from greedy decoding and between seeds."""
    model, tok = tiny("qwen2")
    model.generation_config.update(do_sample=True, temperature=1.5, top_k=50, top_p=0.95)
    ps = prompts(PromptConfig(context_lengths=(2, 5), contexts_per_length=4), "indirect")[:16]

    def run(batch_size, seed=0, greedy=False):
        return evaluate(model, tok, ps, chat=Chat(), generation=Generation(
            max_new_tokens=4, greedy=greedy, batch_size=batch_size, seed=seed))["output"].tolist()

    one = run(1)
    assert run(8) == one
    assert run(8, greedy=True) != one and run(8, seed=1) != one


def test_the_prompt_sampler_draws_from_the_warped_distribution():
    """Gumbel-max on the warped scores: over many prompts' streams the token frequencies match the softmax of the
    logits at the temperature, top-k cut, computed by hand."""
    from transformers import GenerationConfig

    from vlbind.qwen.retrieval import PromptSampler, prompt_generator
    logits = torch.tensor([2.0, 1.0, 0.5, 0.0, -1.0, -3.0])
    n = 20000
    sampler = PromptSampler(GenerationConfig(do_sample=True, temperature=0.8, top_k=4),
                            [prompt_generator(7, i) for i in range(n)])
    picked = sampler(torch.zeros(n, 1, dtype=torch.long), logits.repeat(n, 1))
    assert torch.isfinite(picked).sum(dim=1).eq(1).all()  # one token a row
    freq = torch.bincount(picked.argmax(dim=1), minlength=6).double() / n
    expected = torch.softmax(logits[:4] / 0.8, dim=0).double()
    assert freq[4:].sum() == 0 and torch.allclose(freq[:4], expected, atol=4 * (0.25 / n) ** 0.5)
    with pytest.raises(NotImplementedError, match="typical_p"):
        PromptSampler(GenerationConfig(do_sample=True, typical_p=0.5), [])

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

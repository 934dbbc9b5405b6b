"""Direct / Indirect Retrieval evaluation of one pretrained model (paper, section 2 and appendix B): chat-format
each prompt, generate, score (prompts.is_correct), one tidy row per prompt.

Generation uses the model's own generation_config (the paper: "default inference settings"; sampling where the
model samples, seeded) unless `greedy` is set. Prompts are batched with left padding.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import pandas as pd
import torch

from ..settings import config_defaults
from .prompts import Chat, RetrievalPrompt, is_correct

log = logging.getLogger(__name__)


@dataclass(frozen=True)
@config_defaults("qwen.generation")
class Generation:
    """How answers are generated (config key qwen.generation): at most `max_new_tokens`, greedy or with the model's
    own settings (sampling where it samples, seeded by `seed`), `batch_size` prompts at a time."""
    greedy: bool
    max_new_tokens: int
    batch_size: int
    seed: int


@torch.no_grad()
def evaluate(model, tokenizer, prompts: list[RetrievalPrompt], *, chat: Chat, generation: Generation = Generation(),
             device: str = "cpu") -> pd.DataFrame:
    """One row per prompt: task, n_pairs, context, query_position, answer, output, correct."""
    torch.manual_seed(generation.seed)
    tokenizer.padding_side = "left"
    settings = {"max_new_tokens": generation.max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
    if generation.greedy:
        settings.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    rows, t0 = [], time.time()
    for start in range(0, len(prompts), generation.batch_size):
        chunk = prompts[start:start + generation.batch_size]
        texts = [chat.render(tokenizer, p.text) for p in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        out = model.generate(**enc, **settings)
        for p, ids in zip(chunk, out[:, enc["input_ids"].shape[1]:]):
            text = tokenizer.decode(ids)  # keeps <think> markers, which Qwen3 emits and scoring must see
            for marker in {tokenizer.pad_token, tokenizer.eos_token} - {None}:
                text = text.replace(marker, "")
            rows.append({"task": p.task, "n_pairs": p.n_pairs, "context": p.context, "query_position": p.query_position,
                         "answer": p.answer, "output": text, "correct": is_correct(text, p.answer)})
        done = start + len(chunk)
        rate = done / max(time.time() - t0, 1e-9)
        log.info("%d/%d prompts, %.2f prompts/s, ETA %.0f s", done, len(prompts), rate, (len(prompts) - done) / rate)
    return pd.DataFrame(rows)

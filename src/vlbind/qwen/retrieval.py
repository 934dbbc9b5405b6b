"""Direct / Indirect Retrieval evaluation of one pretrained model (paper, section 2 and appendix B): chat-format
each prompt, generate, score (prompts.is_correct), one tidy row per prompt.

Generation uses the model's own generation_config (the paper: "default inference settings"; sampling where the
model samples, seeded) unless `greedy` is set. Prompts are batched with left padding.
"""

from __future__ import annotations

import logging
import time

import pandas as pd
import torch

from .prompts import Chat, RetrievalPrompt, is_correct

log = logging.getLogger(__name__)


@torch.no_grad()
def evaluate(model, tokenizer, prompts: list[RetrievalPrompt], *, chat: Chat, max_new_tokens: int,
             greedy: bool = False, seed: int = 0, batch_size: int = 8, device: str = "cpu") -> pd.DataFrame:
    """One row per prompt: task, n_pairs, context, query_position, answer, output, correct."""
    torch.manual_seed(seed)
    tokenizer.padding_side = "left"
    settings = {"max_new_tokens": max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
    if greedy:
        settings.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    rows, t0 = [], time.time()
    for start in range(0, len(prompts), batch_size):
        chunk = prompts[start:start + batch_size]
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

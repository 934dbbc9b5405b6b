"""Direct / Indirect Retrieval evaluation of one pretrained model (paper, section 2 and appendix B): chat-format
each prompt, generate, score (prompts.is_correct), one tidy row per prompt.

Generation uses the model's own generation_config (the paper: "default inference settings"; sampling where the
model samples, seeded) unless `greedy` is set. Prompts are batched with left padding. A sampled answer depends on its
prompt and the seed, not on the batch: each prompt draws from a random stream of its own (Gumbel-max on the model's
warped scores, PromptSampler), so `batch_size` sets memory and speed only.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from vlbind.core.settings import config_defaults
from vlbind.qwen.prompts import Chat, RetrievalPrompt, is_correct

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


class PromptSampler(LogitsProcessor):
    """Sampling with one random stream per prompt: each row's next token is the argmax of its warped scores (the
    model's temperature, top-k, top-p, min-p, in transformers' order) plus Gumbel noise from the row's own generator,
    which is a draw from the warped distribution (the Gumbel-max trick). Returned as a one-hot score row, so greedy
    decoding takes the sample; the model's other processors (e.g. repetition_penalty) run before it, as when
    transformers samples."""

    UNSUPPORTED = {"top_h": None, "typical_p": 1.0, "epsilon_cutoff": 0.0, "eta_cutoff": 0.0}

    def __init__(self, generation_config, generators: list[torch.Generator]):
        gc = generation_config
        off = {k: getattr(gc, k, d) for k, d in self.UNSUPPORTED.items() if getattr(gc, k, d) not in (d, None)}
        if off:
            raise NotImplementedError(f"sampling with {off} (the model's generation_config) is not supported; "
                                      "set qwen.generation.greedy: true, or add the warper to vlbind.qwen.retrieval")
        self.warpers = LogitsProcessorList()
        if gc.temperature is not None and gc.temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(gc.temperature))
        if gc.top_k:
            self.warpers.append(TopKLogitsWarper(top_k=gc.top_k))
        if gc.top_p is not None and gc.top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p=gc.top_p))
        if gc.min_p is not None:
            self.warpers.append(MinPLogitsWarper(min_p=gc.min_p))
        self.generators = generators

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        warped = self.warpers(input_ids, scores).float()
        uniform = torch.stack([torch.rand(warped.shape[1], generator=g, dtype=torch.float64)
                               for g in self.generators]).to(warped.device)
        gumbel = -torch.log(-torch.log(uniform.clamp(1e-300, 1.0)))
        pick = (warped.double() + gumbel).argmax(dim=1, keepdim=True)
        return torch.full_like(scores, -math.inf).scatter_(1, pick, 0.0)


def prompt_generator(seed: int, index: int) -> torch.Generator:
    """The random stream of prompt `index` of a run seeded `seed` (independent of the others)."""
    return torch.Generator().manual_seed(int(np.random.SeedSequence([seed, index]).generate_state(1)[0]))


@torch.no_grad()
def evaluate(model, tokenizer, prompts: list[RetrievalPrompt], *, chat: Chat, generation: Generation = Generation(),
             device: str = "cpu") -> pd.DataFrame:
    """One row per prompt: task, n_pairs, context, query_position, answer, output, correct."""
    tokenizer.padding_side = "left"
    config = getattr(model, "generation_config", None)
    sample = not generation.greedy and config is not None and config.do_sample
    settings = {"max_new_tokens": generation.max_new_tokens, "pad_token_id": tokenizer.pad_token_id,
                "do_sample": False, "temperature": None, "top_p": None, "top_k": None, "min_p": None}
    rows, t0 = [], time.time()
    for start in range(0, len(prompts), generation.batch_size):
        chunk = prompts[start:start + generation.batch_size]
        texts = [chat.render(tokenizer, p.text) for p in chunk]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        sampler = ({"logits_processor": LogitsProcessorList([PromptSampler(config, [
            prompt_generator(generation.seed, i) for i in range(start, start + len(chunk))])])} if sample else {})
        out = model.generate(**enc, **settings, **sampler)
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

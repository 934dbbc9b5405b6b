"""Accuracy by number of objects, in and out of distribution (paper, section 4 and Figure 3).

Evaluation uses text prompts of the full vocabulary (vlbind.core.vocab: 216 colors, 216 shapes, 32 items), queried by
color (the paper's reported direction), without noise, with the association list in each of `orders`: shuffled (the
paper's) and/or fixed (in context order, what a positional model trained without shuffling can solve; mini).
The prompts come from a fixed evaluation seed, drawn at once for each length and order and scored in batches, so
every model is scored on the same prompts whatever `batch_size` (memory only). Evaluation never trains:
it runs under `torch.no_grad()` in eval mode and leaves the model's mode as it found it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from vlbind.core.schema import check_fields
from vlbind.core.settings import config_defaults
from vlbind.core.vocab import Vocab
from vlbind.data.batching import in_batches
from vlbind.data.spec import in_order, text_retrieval_spec
from vlbind.data.tasks import BY_COLOR, RETRIEVAL, generate
from vlbind.model.inference import count_correct
from vlbind.model.transformer import Transformer


@dataclass(frozen=True)
@config_defaults("evaluate")
class EvalConfig:
    min_objects: int
    max_objects: int
    train_max_objects: int  # lengths above this are out of distribution
    prompts_per_length: int
    batch_size: int
    seed: int
    orders: tuple[str, ...]  # association-list orders evaluated; the first decides convergence

    def __post_init__(self) -> None:
        object.__setattr__(self, "orders", tuple(self.orders))
        check_fields("evaluate", self)  # types and ranges: the schema's
        if self.min_objects > self.max_objects:
            raise ValueError(f"EvalConfig needs min_objects <= max_objects, got {self.min_objects}..{self.max_objects}")


log = logging.getLogger(__name__)
EVAL_SPEC = text_retrieval_spec(2, Vocab.n_items)  # up to every item bound


@torch.no_grad()
def evaluate(model: Transformer, cfg: EvalConfig, device="cpu", precision: str = "fp32") -> pd.DataFrame:
    """One row per prompt order and number of objects: order, n_objects, correct, n_prompts, accuracy,
    in_distribution. Logs each length's accuracy with the rate and an ETA (a prompt's cost taken as its objects)."""
    rows, t0 = [], time.time()
    lengths = range(cfg.min_objects, cfg.max_objects + 1)
    total, done = len(cfg.orders) * sum(lengths), 0
    for order in cfg.orders:
        spec = in_order(EVAL_SPEC, order)
        for n in lengths:
            rng = np.random.default_rng([cfg.seed, n])
            prompts = generate(spec, cfg.prompts_per_length, rng, n_objects=n, kind=RETRIEVAL, query_by=BY_COLOR,
                               noise=False)
            correct, count = count_correct(model, in_batches(prompts, cfg.batch_size), device, precision)
            rows.append({"order": order, "n_objects": n, "correct": correct, "n_prompts": count,
                         "accuracy": correct / count, "in_distribution": n <= cfg.train_max_objects})
            done += n
            wall = time.time() - t0
            log.info("evaluate %s, %d objects: accuracy %.4f | %.1f prompts/s, ETA %.0f s", order, n, correct / count,
                     len(rows) * cfg.prompts_per_length / max(wall, 1e-9), wall * (total - done) / done)
    return pd.DataFrame(rows)

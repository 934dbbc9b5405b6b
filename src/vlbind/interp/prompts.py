"""The prompts every analysis runs on, and the names of prompt roles the analyses' tables use."""

from __future__ import annotations

import numpy as np

from vlbind.data.batching import in_batches
from vlbind.data.spec import in_order, text_retrieval_spec
from vlbind.data.tasks import BY_COLOR, RETRIEVAL, Batch, Role, generate

# Text prompts of <= 8 objects queried by color, as the paper analyses (full vocabulary; order: an argument).
ANALYSIS_SPEC = text_retrieval_spec(2, 8)
ROLES = {"context color": Role.CONTEXT_COLOR, "context shape": Role.CONTEXT_SHAPE,
         "association shape": Role.ASSOCIATION_KEY, "association item": Role.ASSOCIATION_ITEM,
         "query": Role.QUERY, "answer": Role.ANSWER}


def analysis_prompts(n: int, seed: int, batch_size: int = 256, *, order: str) -> list[Batch]:
    """`n` retrieval prompts of ANALYSIS_SPEC queried by color, without noise, association lists in `order`
    (spec.ORDERS), in batches of `batch_size`: the same prompts for any batch size."""
    rng = np.random.default_rng([seed, 0x40])
    spec = in_order(ANALYSIS_SPEC, order)
    return in_batches(generate(spec, n, rng, kind=RETRIEVAL, query_by=BY_COLOR, noise=False), batch_size)


def slot_of_positions(batch: Batch) -> np.ndarray:
    """(B, T) object slot per position, with [ANSWER] given the queried slot."""
    slots = batch.slots.astype(np.int64)
    rows = np.arange(len(batch))
    slots[rows, batch.answer_pos] = batch.query_slot
    return slots

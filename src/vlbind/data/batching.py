"""A batch of prompts cut into smaller ones for memory and speed, the prompts unchanged: consecutive batches of a
size (`in_batches`: evaluation and the analyses draw their prompts at once and score them in batches, so the prompts
do not depend on the batch size), or sorted by length into batches of a number of positions (`by_length`: the
training step's sub-batches, train.sub_batch_tokens), each cut to its longest prompt."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from vlbind.data.tasks import TOKEN_ARRAYS, Batch, Role


def batch_sizes(total: int, size: int) -> list[int]:
    """Split `total` prompts into batches of `size`, the last one smaller if needed."""
    return [size] * (total // size) + ([total % size] if total % size else [])


def in_batches(batch: Batch, size: int) -> list[Batch]:
    """`batch` as consecutive batches of `size` prompts (the last one smaller), each cut to its longest prompt: drawn
    once and scored in batches, the prompts do not depend on the batch size (a memory setting)."""
    if batch.groups is not None:
        raise ValueError("in_batches splits single-query batches, not packed ones (pack_queries)")
    return [_cut(batch.subset(slice(a, a + size))) for a in range(0, len(batch), size)]


def by_length(batch: Batch, tokens: int) -> list[Batch]:
    """`batch` sorted by prompt length (stable) and split into consecutive batches of at most `tokens` positions
    each (prompts x the longest of them; one prompt at least), each cut to its longest prompt and, packed, to its
    most query groups: the same prompts with little padding (train.sub_batch_tokens; a packed batch pads every prompt to
    its longest)."""
    length = (batch.roles != Role.PAD).sum(1)
    order = np.argsort(length, kind="stable")
    starts = [0]
    for i in range(1, len(batch)):
        if (i - starts[-1] + 1) * length[order[i]] > tokens:
            starts.append(i)
    return [_cut(batch.subset(order[a:b])) for a, b in zip(starts, [*starts[1:], len(batch)])]


def _cut(part: Batch) -> Batch:
    """`part` without the padding every one of its prompts has: positions past its longest prompt and, packed,
    query groups past its most."""
    width = int(np.nonzero((part.roles != Role.PAD).any(0))[0].max()) + 1
    cut = {k: getattr(part, k)[:, :width] for k in TOKEN_ARRAYS}
    if part.groups is not None:
        q = int((part.answer_pos >= 0).sum(1).max())
        cut |= {"groups": part.groups[:, :width], "answer_pos": part.answer_pos[:, :q], "target": part.target[:, :q],
                "query_slot": part.query_slot[:, :q]}
    return replace(part, **cut)

"""Running a trained model on prompts: tensors from a Batch, logits at the [ANSWER] positions under the chosen
autocast precision, and accuracy. Shared by training (validation), evaluation and the analyses; nothing here
trains.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import torch

from vlbind.core.device import autocast
from vlbind.data.tasks import Batch
from vlbind.model.transformer import Transformer, check_positions

if TYPE_CHECKING:
    from vlbind.data.bank import ImageBank


def model_inputs(batch: Batch, device, bank: ImageBank | None = None):
    """(tokens, positions, images) tensors for Transformer.residual; image features are read from `bank`.
    Copies to a GPU do not wait for it (a blocking copy waits for every queued kernel: the host would idle)."""
    tokens = torch.from_numpy(batch.tokens).to(device, non_blocking=True)
    positions = torch.from_numpy(batch.positions).to(device, non_blocking=True)
    images = None
    mask = batch.image_ids >= 0
    if mask.any():
        if bank is None:
            raise ValueError("the batch holds image-context prompts but no image bank was given")
        features = torch.from_numpy(bank.gather(batch.image_ids[mask], batch.patches[mask]))
        images = (torch.from_numpy(mask).to(device, non_blocking=True), features.to(device, non_blocking=True))
    return tokens, positions, images


def answer_logits(model: Transformer, batch: Batch, device, precision: str = "fp32",
                  bank: ImageBank | None = None, at: np.ndarray | None = None) -> torch.Tensor:
    """Logits at each prompt's [ANSWER] position, (B, vocab), float32; for a packed batch at every query
    group's [ANSWER], (B, Q, vocab); with `at` (B, K), at those positions instead (entries -1, the padding
    of answer_pos, give meaningless rows). The last block and the unembedding run there only. `model` may be
    a Transformer wrapped by torch.compile (train.compile): its forward is what runs."""
    check_positions(int(batch.positions.max()), model.cfg)  # here, on the host: no wait for the device
    tokens, positions, images = model_inputs(batch, device, bank)
    groups = None if batch.groups is None else torch.from_numpy(batch.groups).to(device, non_blocking=True)
    at = batch.answer_pos if at is None else at
    with autocast(device, precision):
        at = torch.from_numpy(np.maximum(at, 0)).to(tokens.device, non_blocking=True)
        logits = model(tokens, positions, images, groups=groups, at=at)
    return logits.float()


@torch.no_grad()
def correct(model: Transformer, batches: Iterable[Batch], device, precision: str = "fp32",
            bank: ImageBank | None = None) -> np.ndarray:
    """Whether the argmax at each prompt's [ANSWER] is its target, (prompts,) bool over `batches` in order, in eval
    mode; the model's mode is restored."""
    was_training = model.training
    model.eval()
    hits = []
    try:
        for b in batches:
            hits.append(answer_logits(model, b, device, precision, bank).argmax(-1).cpu().numpy() == b.target)
    finally:
        model.train(was_training)
    return np.concatenate(hits) if hits else np.zeros(0, dtype=bool)


def count_correct(model: Transformer, batches: Iterable[Batch], device, precision: str = "fp32",
                  bank: ImageBank | None = None) -> tuple[int, int]:
    """(argmax at [ANSWER] == target, prompts) over `batches` (correct)."""
    hits = correct(model, batches, device, precision, bank)
    return int(hits.sum()), len(hits)


def accuracy(model: Transformer, batches: Iterable[Batch], device, precision: str = "fp32",
             bank: ImageBank | None = None) -> float:
    hits, total = count_correct(model, batches, device, precision, bank)
    return hits / total

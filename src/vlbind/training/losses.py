"""The training losses (appendix D.2): cross-entropy at [ANSWER], a mean over prompts whatever their number of
labels (`prompt_loss`), and the binding loss.

Binding loss (`train.binding_loss` > 0, not in the paper): at each association item of a retrieval prompt the
model also predicts the attribute a query would name for that item's object (its color when the list is
keyed by shapes), weighted by `binding_loss`. The paper's only label is the answer, which rewards no
intermediate step (its appendix D.3); this one rewards binding each item to its object, after which the
answer is a one-step lookup of the query among the items.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from vlbind.data.tasks import BY_COLOR, RETRIEVAL, Batch, Role
from vlbind.model.inference import answer_logits
from vlbind.training.config import TrainConfig

if TYPE_CHECKING:
    from vlbind.data.bank import ImageBank
    from vlbind.model.transformer import Transformer


def prompt_loss(logits: torch.Tensor, target: np.ndarray) -> torch.Tensor:
    """Cross-entropy, a mean over prompts. logits (B, K, vocab), target (B, K) with -1 where a prompt has no
    label: each prompt's loss is the mean over its labels, so every prompt weighs the same whatever its
    length. For a packed batch the expected gradient is then that of single-query training."""
    target = torch.from_numpy(target).to(logits.device, non_blocking=True)
    has = target >= 0
    losses = F.cross_entropy(logits.flatten(0, 1), target.clamp(min=0).flatten(), reduction="none")
    return ((losses.view_as(target) * has).sum(1) / has.sum(1).clamp(min=1)).mean()


def binding_targets(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(positions, targets), each (B, P): the association items of retrieval prompts and, for each, the
    attribute a query names for its object (its color when the list is keyed by shapes); -1 elsewhere."""
    B, P = batch.colors.shape
    pos = np.full((B, P), -1)
    r, t = np.nonzero((batch.roles == Role.ASSOCIATION_ITEM) & (batch.kind == RETRIEVAL)[:, None])
    pos[r, np.concatenate([np.arange(c) for c in np.bincount(r, minlength=B)])] = t
    slot = batch.slots[np.arange(B)[:, None], np.maximum(pos, 0)]
    named = np.where((batch.query_by == BY_COLOR)[:, None], batch.colors, batch.shapes)
    return pos, np.where(pos >= 0, np.take_along_axis(named, np.maximum(slot, 0), 1), -1)


def training_loss(model: Transformer, batch: Batch, cfg: TrainConfig, device, bank: ImageBank | None = None):
    """The stage's loss on one training batch, single-query or packed: cross-entropy at [ANSWER] (prompt_loss),
    plus `cfg.binding_loss` times the binding loss (binding_targets), from one forward pass."""
    at, target = batch.answer_pos, batch.target
    if at.ndim == 1:
        at, target = at[:, None], target[:, None]
    if not cfg.binding_loss:
        return prompt_loss(answer_logits(model, batch, device, cfg.precision, bank, at=at), target)
    pos, bound = binding_targets(batch)
    logits = answer_logits(model, batch, device, cfg.precision, bank, at=np.concatenate([at, pos], 1))
    Q = at.shape[1]
    return prompt_loss(logits[:, :Q], target) + cfg.binding_loss * prompt_loss(logits[:, Q:], bound)

"""Attention knockouts (paper, appendix G.1): forbid attention from every position of a source kind to
every position of a target kind, in all layers and heads, and measure the accuracy drop.

Two families of edges:
- role to role: e.g. every association item may not attend to any context color;
- matching edges of appendix G, restricted to the same object slot: query -> its context color,
  query -> its context shape, association shape -> its context shape, association item -> its
  association shape, context shape -> its context color, [ANSWER] -> query, [ANSWER] -> the
  association item of the queried object, the query -> that item, and both ("query+answer") at once: a model
  that reads the item at the query token and copies it to [ANSWER] loses little to either single knockout
  of the item that the joint one does not explain.
A position always keeps attending to itself (so no attention row is empty); a knocked-out edge that no
prompt contains (the target never precedes the source) is reported as NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from vlbind.core.settings import config_defaults
from vlbind.data.tasks import Batch
from vlbind.interp.prompts import ROLES, analysis_prompts, slot_of_positions
from vlbind.model.hooks import hook_name, knockout_hook
from vlbind.model.inference import accuracy, count_correct
from vlbind.model.transformer import Transformer

# (source, target, same slot?) of appendix G's matching edges; [ANSWER]'s slot is the queried object's.
MATCHING = [("query", "context color"), ("query", "context shape"), ("association shape", "context shape"),
            ("association item", "association shape"), ("context shape", "context color"),
            ("answer", "query"), ("answer", "association item"), ("query", "association item"),
            ("query+answer", "association item")]


def edge_mask(batch: Batch, source: str, target: str, matching: bool) -> np.ndarray:
    """(B, T, T) bool [query position, key position]: the attention edges to forbid (causal ones only)."""
    roles = batch.roles
    src = np.isin(roles, [ROLES[s] for s in source.split("+")])  # "a+b": either source
    tgt = roles == ROLES[target]
    mask = src[:, :, None] & tgt[:, None, :]
    if matching:
        slots = slot_of_positions(batch)
        mask &= slots[:, :, None] == slots[:, None, :]
    T = roles.shape[1]
    return mask & np.tril(np.ones((T, T), dtype=bool), k=-1)[None]  # causal, never the diagonal


def accuracy_with_knockout(model: Transformer, batches: list[Batch], masks: list[np.ndarray] | None,
                           device="cpu") -> float:
    """Answer accuracy with the given (B, T, T) blocked-attention masks applied in every layer."""
    if masks is None:
        return accuracy(model, batches, device)
    hits = total = 0
    names = [hook_name(i, "attn.hook_attn_scores") for i in range(model.cfg.n_layers)]
    for b, m in zip(batches, masks):
        with model.hooks([(n, knockout_hook(torch.as_tensor(m, device=device))) for n in names]):
            h, t = count_correct(model, [b], device)
        hits, total = hits + h, total + t
    return hits / total


@dataclass(frozen=True)
@config_defaults("interp.knockout")
class KnockoutConfig:
    """Config key interp.knockout (defaults: config.yaml's)."""
    prompts: int  # prompts of 2..8 objects per model
    seed: int


def knockout_table(model: Transformer, n_prompts: int, seed: int, device="cpu",
                   *, order: str) -> pd.DataFrame:
    """One row per knocked-out edge: kind (role / matching), source, target, accuracy, baseline, drop."""
    batches = analysis_prompts(n_prompts, seed, order=order)
    baseline = accuracy_with_knockout(model, batches, None, device)
    edges = [("role", s, t) for s in ROLES for t in ROLES if s != t] + [("matching", s, t) for s, t in MATCHING]
    rows = []
    for kind, source, target in edges:
        masks = [edge_mask(b, source, target, kind == "matching") for b in batches]
        if not any(m.any() for m in masks):
            acc = float("nan")
        else:
            acc = accuracy_with_knockout(model, batches, masks, device)
        rows.append({"kind": kind, "source": source, "target": target, "accuracy": acc, "baseline": baseline,
                     "drop": baseline - acc})
    return pd.DataFrame(rows)


SETTINGS = KnockoutConfig  # its config section, interp.knockout (vlbind.interp.settings)
FIGURES = ("fig10", "fig13")  # drawn from its tables; declares the analysis (interp.ANALYSES)


def run(model: Transformer, cfg: KnockoutConfig, device: str, order: str) -> tuple[pd.DataFrame, dict]:
    """The analysis as the DAG runs it (interp.analyze), with its settings (config key interp.knockout)."""
    return knockout_table(model, cfg.prompts, cfg.seed, device, order=order), {}

"""Layer relevance (ours, after a companion abstract on layer relevance that ships with the paper): for each block,
the cosine similarity between the residual stream entering and leaving it (a common proxy for how much a
layer matters) and the accuracy drop when the block is skipped (what it does matter), with their rank
correlation. A good proxy would give a strongly negative correlation: high similarity, small drop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from vlbind.core.settings import config_defaults
from vlbind.data.tasks import Batch, Role
from vlbind.interp.prompts import analysis_prompts
from vlbind.model.hooks import hook_name, skip_block_hooks
from vlbind.model.inference import accuracy, model_inputs
from vlbind.model.transformer import Transformer


@torch.no_grad()
def block_cosines(model: Transformer, batches: list[Batch], device="cpu") -> np.ndarray:
    """(n_layers,) mean cosine similarity between each block's input and output residual stream, over all
    non-padding positions of `batches`."""
    model.eval()
    L = model.cfg.n_layers
    sums, count = np.zeros(L), 0
    for b in batches:
        names = [hook_name(i, f"hook_resid_{w}") for i in range(L) for w in ("pre", "post")]
        _, store = model.residual_with_cache(names, *model_inputs(b, device)[:2])
        real = torch.as_tensor(b.roles != Role.PAD, device=device)
        for i in range(L):
            pre, post = store[hook_name(i, "hook_resid_pre")], store[hook_name(i, "hook_resid_post")]
            cos = F.cosine_similarity(pre, post, dim=-1)
            sums[i] += float(cos[real].sum())
        count += int(real.sum())
    return sums / count


@torch.no_grad()
def skip_accuracy(model: Transformer, batches: list[Batch], layer: int | None, device="cpu") -> float:
    """Answer accuracy with block `layer` bypassed (None: nothing skipped)."""
    hooks = [] if layer is None else skip_block_hooks(layer)
    with model.hooks(hooks):
        return accuracy(model, batches, device)


@dataclass(frozen=True)
@config_defaults("interp.layer_relevance")
class LayerRelevanceConfig:
    """Config key interp.layer_relevance (defaults: config.yaml's)."""
    prompts: int  # prompts of 2..8 objects per model
    seed: int


def layer_relevance_table(model: Transformer, n_prompts: int, seed: int, device="cpu",
                          *, order: str) -> tuple[pd.DataFrame, float]:
    """Rows (layer, cosine, accuracy_skipped, baseline, drop) and the Spearman correlation of cosine and drop."""
    batches = analysis_prompts(n_prompts, seed, order=order)
    baseline = skip_accuracy(model, batches, None, device)
    cos = block_cosines(model, batches, device)
    rows = [{"layer": i, "cosine": float(cos[i]), "accuracy_skipped": (a := skip_accuracy(model, batches, i, device)),
             "baseline": baseline, "drop": baseline - a} for i in range(model.cfg.n_layers)]
    table = pd.DataFrame(rows)
    return table, spearman(table["cosine"], table["drop"])


def spearman(a: pd.Series, b: pd.Series) -> float:
    """Rank correlation (Pearson on average ranks); NaN when either side is constant."""
    if a.nunique() < 2 or b.nunique() < 2:
        return float("nan")
    return float(a.rank().corr(b.rank()))


SETTINGS = LayerRelevanceConfig  # its config section, interp.layer_relevance (vlbind.interp.settings)
FIGURES = ("fig_layer_relevance",)  # drawn from its tables; declares the analysis (interp.ANALYSES)


def run(model: Transformer, cfg: LayerRelevanceConfig, device: str, order: str) -> tuple[pd.DataFrame, dict]:
    """The analysis as the DAG runs it (interp.analyze), with its settings (config key interp.layer_relevance)."""
    table, rho = layer_relevance_table(model, cfg.prompts, cfg.seed, device, order=order)
    return table, {"spearman_cosine_drop": rho}

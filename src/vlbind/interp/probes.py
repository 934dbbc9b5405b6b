"""Linear probes (paper, appendix G.1): at every layer and at every position of a role, decode the slot
index, color, shape and item of the object that position is bound to, with a linear classifier trained
on one set of prompts and scored on another.

"Bound to": a context color/shape or association shape/item belongs to its object's slot; the query and
[ANSWER] belong to the queried object. Layer L is the residual stream entering block L (L = n_layers:
after the last block). Chance is the held-out accuracy of always guessing the most frequent training label.
The probe is a ridge-regression classifier (least squares onto one-hot labels, L2 penalty `ridge`,
prediction = argmax), solved in closed form for all layers at once: deterministic, and a whole sweep
over 7 roles x 4 attributes x 13 layers takes seconds where gradient-trained softmax probes took minutes
on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from vlbind.core.settings import config_defaults
from vlbind.data.tasks import Batch
from vlbind.interp.prompts import ROLES, analysis_prompts, slot_of_positions
from vlbind.interp.ridge import ridge_inputs
from vlbind.model.hooks import resid_name
from vlbind.model.inference import model_inputs
from vlbind.model.transformer import Transformer

PROBE_ROLES = ("context color", "context shape", "association shape", "association item", "query", "answer")
ATTRIBUTES = ("slot", "color", "shape", "item")


@dataclass(frozen=True)
@config_defaults("interp.probes")
class ProbeConfig:
    """Config key interp.probes (defaults: config.yaml's)."""
    train_prompts: int
    test_prompts: int
    ridge: float  # L2 penalty on standardised features
    seed: int


@torch.no_grad()
def collect(model: Transformer, batches: list[Batch], device="cpu") -> dict[str, tuple[np.ndarray, dict]]:
    """Per role: residuals (L+1, N, d) at its positions and the labels (N,) of each attribute."""
    model.eval()
    L = model.cfg.n_layers
    names = [resid_name(i, L) for i in range(L + 1)]
    feats: dict[str, list] = {r: [] for r in PROBE_ROLES}
    labels: dict[str, dict[str, list]] = {r: {a: [] for a in ATTRIBUTES} for r in PROBE_ROLES}
    for b in batches:
        _, store = model.residual_with_cache(names, *model_inputs(b, device)[:2])
        stack = torch.stack([store[n] for n in names]).cpu().numpy()  # (L+1, B, T, d)
        slots = slot_of_positions(b)
        for role in PROBE_ROLES:
            r, t = np.nonzero(b.roles == ROLES[role])
            s = slots[r, t]
            feats[role].append(stack[:, r, t])
            labels[role]["slot"].append(s)
            labels[role]["color"].append(b.colors[r, s])
            labels[role]["shape"].append(b.shapes[r, s])
            labels[role]["item"].append(b.items[r, s])
    return {role: (np.concatenate(feats[role], axis=1), {a: np.concatenate(v) for a, v in labels[role].items()})
            for role in PROBE_ROLES}


def fit_and_score(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
                  cfg: ProbeConfig = ProbeConfig()) -> tuple[np.ndarray, float]:
    """Ridge-classifier probes, one per leading index of x (L, N, d). Returns (held-out accuracy per probe
    (L,), chance = accuracy of the most frequent training label on the test set)."""
    xt, onehot, xe, y_te, chance = ridge_inputs(x_train, y_train, x_test, y_test)
    gram = xt.transpose(1, 2) @ xt + cfg.ridge * torch.eye(xt.shape[-1], dtype=xt.dtype)
    w = torch.linalg.solve(gram, xt.transpose(1, 2) @ onehot)  # (L, d + 1, classes)
    pred = (xe @ w).argmax(-1).numpy()
    accuracy = (pred == y_te[None]).mean(1)
    return accuracy, chance


def probe_table(model: Transformer, cfg: ProbeConfig = ProbeConfig(), device="cpu",
                *, order: str) -> pd.DataFrame:
    """Tidy rows: role, attribute, layer, accuracy, chance."""
    train = collect(model, analysis_prompts(cfg.train_prompts, cfg.seed, order=order), device)
    test = collect(model, analysis_prompts(cfg.test_prompts, cfg.seed + 1, order=order), device)
    rows = []
    for role in PROBE_ROLES:
        for attribute in ATTRIBUTES:
            acc, chance = fit_and_score(train[role][0], train[role][1][attribute], test[role][0],
                                        test[role][1][attribute], cfg)
            rows += [{"role": role, "attribute": attribute, "layer": layer, "accuracy": float(a), "chance": chance}
                     for layer, a in enumerate(acc)]
    return pd.DataFrame(rows)


SETTINGS = ProbeConfig  # its config section, interp.probes (vlbind.interp.settings)
FIGURES = ("fig11", "fig12")  # drawn from its tables; declares the analysis (interp.ANALYSES)


def run(model: Transformer, cfg: ProbeConfig, device: str, order: str) -> tuple[pd.DataFrame, dict]:
    """The analysis as the DAG runs it (interp.analyze), with its settings (config key interp.probes)."""
    return probe_table(model, cfg, device, order=order), {}

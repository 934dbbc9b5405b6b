"""The ridge-classifier probe's inputs (interp.probes, the paper's appendix G.1; qwen.probes for the Qwen models): its
own module, torch and numpy only, so that the Qwen probes share it without importing this package's model stack."""

from __future__ import annotations

import numpy as np
import torch


def ridge_inputs(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray):
    """What a ridge-classifier probe solves with, shared by the primal (interp.probes.fit_and_score) and the
    dual (qwen.probes) solution: features (L, N, d) as float64, standardised by the training rows' mean and std
    and given a ones column (the bias); one-hot training labels (N, classes); test labels as class indices
    (-1 for a label never seen in training, which can't be hit); chance = held-out accuracy of the most
    frequent training label."""
    classes, y_tr = np.unique(y_train, return_inverse=True)
    index = {c: i for i, c in enumerate(classes)}
    y_te = np.array([index.get(c, -1) for c in y_test])
    xt, xe = torch.as_tensor(x_train, dtype=torch.float64), torch.as_tensor(x_test, dtype=torch.float64)
    mean, std = xt.mean(1, keepdim=True), xt.std(1, keepdim=True) + 1e-6
    ones = lambda x: torch.cat([x, torch.ones(*x.shape[:2], 1, dtype=x.dtype)], dim=-1)  # noqa: E731
    xt, xe = ones((xt - mean) / std), ones((xe - mean) / std)
    onehot = torch.nn.functional.one_hot(torch.as_tensor(y_tr), len(classes)).to(xt.dtype)
    chance = float((y_te == np.bincount(y_tr).argmax()).mean())
    return xt, onehot, xe, y_te, chance

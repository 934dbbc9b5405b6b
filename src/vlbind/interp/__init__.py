"""Mechanistic analyses of trained models (paper, section 5; appendices F, G): interchange interventions,
attention knockouts, linear probes and layer relevance. All run on text prompts, queried by color."""

from __future__ import annotations

import importlib

from ..device import autocast

# The registry: analysis name (= its module, whose `run(model, settings, device, order)` returns (table, summary))
# -> the figures drawn from its tables (vlbind.figures). Config key interp.<name> holds its settings.
ANALYSES = {"interchange": ("fig4", "fig9"), "knockout": ("fig10", "fig13"), "probes": ("fig11", "fig12"),
            "layer_relevance": ("fig_layer_relevance",)}


def analyze(analysis: str, model, settings: dict, device="cpu", order: str = "shuffled", precision: str = "fp32"):
    """Run one analysis of ANALYSES on `model` with its config section (config key interp.<analysis>), on
    prompts whose association lists are in `order` (config key interp.order; tasks.ORDERS), under the autocast
    `precision` (device.precision_for: "bf16" or "fp32"; config key `precision`, as training and evaluation).

    Returns (table, summary): a tidy DataFrame, one row per measurement, and a dict of run-level numbers that
    are also stored as table columns (interchange: pairs generated and kept; layer relevance: the Spearman
    correlation of cosine and skip drop; empty for the others)."""
    if analysis not in ANALYSES:
        raise ValueError(f"unknown analysis {analysis!r}; valid: {list(ANALYSES)}")
    with autocast(device, precision):
        table, summary = importlib.import_module(f"{__name__}.{analysis}").run(model, settings, device, order)
    for k, v in summary.items():
        table[k] = v
    return table, summary

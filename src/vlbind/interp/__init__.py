"""Mechanistic analyses of trained models (paper, section 5; appendices F, G): interchange interventions,
attention knockouts, linear probes and layer relevance. All run on text prompts, queried by color."""

from __future__ import annotations

from vlbind.core.device import autocast
from vlbind.core.settings import from_dict

# Analysis name (config key interp.<name> holds its settings; module vlbind.interp.<name> its SETTINGS and `run`)
# -> the figures drawn from its tables (vlbind.figures). Names only: the DAG is built from them without torch.
ANALYSES = {"interchange": ("fig4", "fig9"), "knockout": ("fig10", "fig13"), "probes": ("fig11", "fig12"),
            "layer_relevance": ("fig_layer_relevance",)}


def analyze(analysis: str, model, cfg, device: str, order: str, precision: str):
    """Run one analysis of ANALYSES on `model` with its settings `cfg` (the dataclass that
    `settings(analysis, section)` builds from config key interp.<analysis>), on prompts whose association lists are
    in `order` (config key interp.order; tasks.ORDERS), under the autocast `precision` (device.precision_for: "bf16"
    or "fp32"; config key `precision`, as training and evaluation).

    Returns (table, summary): a tidy DataFrame, one row per measurement, and a dict of run-level numbers that
    are also stored as table columns (interchange: pairs generated and kept; layer relevance: the Spearman
    correlation of cosine and skip drop; empty for the others)."""
    with autocast(device, precision):
        table, summary = _module(analysis).run(model, cfg, device, order)
    for k, v in summary.items():
        table[k] = v
    return table, summary


def settings(analysis: str, section: dict):
    """The settings dataclass of `analysis` (its module's SETTINGS) from its config section; an unknown key raises
    naming it."""
    return from_dict(_module(analysis).SETTINGS, section)


def _module(analysis: str):
    """vlbind.interp.<analysis>, with its `SETTINGS` dataclass and `run(model, settings, device, order) -> (table,
    summary)`. Imported here, on call, by name: the analyses import torch, building the DAG does not."""
    from vlbind.interp import interchange, knockout, layer_relevance, probes

    modules = {"interchange": interchange, "knockout": knockout, "probes": probes, "layer_relevance": layer_relevance}
    if analysis not in ANALYSES:
        raise ValueError(f"unknown analysis {analysis!r}; valid: {list(ANALYSES)}")
    return modules[analysis]

"""Mechanistic analyses of trained models (paper, section 5; appendices F, G): interchange interventions,
attention knockouts, linear probes and layer relevance. All run on text prompts, queried by color."""

from __future__ import annotations

ANALYSES = ("interchange", "knockout", "probes", "layer_relevance")


def analyze(analysis: str, model, settings: dict, device="cpu", order: str = "shuffled"):
    """Run one analysis of ANALYSES on `model` with its config section (config key interp.<analysis>), on
    prompts whose association lists are in `order` (config key interp.order; tasks.ORDERS).

    Returns (table, summary): a tidy DataFrame, one row per measurement, and a dict of run-level numbers that
    are also stored as table columns (interchange: pairs generated and kept; layer relevance: the Spearman
    correlation of cosine and skip drop; empty for the others)."""
    from . import interchange, knockout, layer_relevance, probes

    if analysis == "interchange":
        table, info = interchange.sweep(model, settings["pairs"], settings["seed"], device=device, order=order)
        summary = {"pairs_generated": info["generated"], "pairs_kept": info["kept"]}
    elif analysis == "knockout":
        table, summary = knockout.knockout_table(model, settings["prompts"], settings["seed"], device, order), {}
    elif analysis == "probes":
        table, summary = probes.probe_table(model, probes.ProbeConfig(**settings), device, order), {}
    elif analysis == "layer_relevance":
        table, rho = layer_relevance.layer_relevance_table(model, settings["prompts"], settings["seed"], device, order)
        summary = {"spearman_cosine_drop": rho}
    else:
        raise ValueError(f"unknown analysis {analysis!r}; valid: {ANALYSES}")
    for k, v in summary.items():
        table[k] = v
    return table, summary

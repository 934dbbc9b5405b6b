"""Mechanistic analyses of trained models (paper, section 5; appendices F, G): interchange interventions,
attention knockouts, linear probes and layer relevance. All run on text prompts, queried by color."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from vlbind.core.device import autocast
from vlbind.core.settings import from_dict


def _registered() -> dict[str, tuple[str, ...]]:
    """Analysis name -> the figures drawn from its tables: every module of this package that declares `FIGURES`
    (beside its `SETTINGS` and `run`) is an analysis of that name, registered where it is defined. Read from the
    source, not imported: the analyses import torch, building the DAG does not. In the paper's figure order."""
    found = {}
    for path in Path(__file__).parent.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "FIGURES" for t in node.targets):
                found[path.stem] = tuple(ast.literal_eval(node.value))
    number = lambda fig: int(m.group()) if (m := re.search(r"\d+", fig)) else float("inf")
    return dict(sorted(found.items(), key=lambda item: (number(item[1][0]), item[0])))


# config key interp.<name> holds an analysis's settings where its SETTINGS' defaults do not serve
ANALYSES = _registered()


def analyze(analysis: str, model, cfg, device: str, order: str, precision: str):
    """Run one analysis of ANALYSES on `model` with its settings `cfg` (the dataclass that
    `settings(analysis, section)` builds from config key interp.<analysis>), on prompts whose association lists are
    in `order` (config key interp.order; spec.ORDERS), under the autocast `precision` (device.precision_for: "bf16"
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
    if analysis not in ANALYSES:
        raise ValueError(f"unknown analysis {analysis!r}; valid: {list(ANALYSES)}")
    return importlib.import_module(f"vlbind.interp.{analysis}")

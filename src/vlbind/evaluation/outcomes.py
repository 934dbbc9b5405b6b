"""What a run's result tables say about it, for the tables and figures (no torch): whether it diverged in
training or did not converge (then it is marked and left out of means, appendix D.8), and its mean OOD accuracy.
Tables over many runs: vlbind.evaluation.tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from vlbind.core.settings import NON_FINITE, config_defaults
from vlbind.training.config import attempt_count

STALLED = "stalled at chance"  # how divergence names a stage whose best validation stayed near chance


@dataclass(frozen=True)
@config_defaults("divergence")
class DivergenceRule:
    """Which runs are marked and left out of means (config key `divergence`): a stage whose last validation lies
    `collapse_drop` below its best, or whose best stays within `stall_margin` of chance (None: off), diverged; a run
    whose mean in-distribution accuracy lies below `min_in_distribution` (None: off) did not converge."""
    collapse_drop: float
    stall_margin: float | None
    min_in_distribution: float | None


def divergence(curves: dict[str, pd.DataFrame], collapse_drop: float, metas: dict[str, dict] | None = None,
               stall_margin: float | None = None) -> str | None:
    """Why a run counts as diverged, or None, from the training curves (metrics.parquet) of every stage in its lineage,
    in training order: the first stage that ended on non-finite steps (more than `train.max_skipped_steps` skipped for
    a non-finite loss or gradient; in a length of its ramp, from `metas`, or in its own curve: `finite` False), or
    whose last validation accuracy lies more than `collapse_drop` below its best (for a stage retried under the retry
    rule, in the curve of the attempt whose weights it kept: the others were discarded, and their curves one after
    another would read as a collapse where a retry starts), or (with `metas`, the stages'
    meta.json, and `stall_margin`) that trained but whose best validation stayed within `stall_margin` of chance (the
    stage's `val_chance`): it stalled, e.g. on a plateau at chance, and what follows it builds on a model that learnt
    nothing there. Such runs are marked in the result tables and left out of means
    (fig3, OOD table), as the paper leaves out its one divergent run."""
    for stage, curve in curves.items():
        meta = (metas or {}).get(stage, {})
        for length in meta.get("ramp") or []:  # a ramped stage's shorter lengths, trained before its own curve
            if length["stopped_because"] == NON_FINITE:
                return f"{stage}: non-finite steps in its ramp, at {length['max_objects']} objects"
        if "attempt" in curve and "attempt" in meta:  # the retry rule: the kept attempt's own curve (training.attempts)
            curve = curve[curve["attempt"] == meta["attempt"]]
        if curve.empty:
            continue
        bad = curve[~curve["finite"]]
        if len(bad):
            return f"{stage}: more non-finite steps than allowed by step {int(bad['step'].iloc[0])}"
        best = curve.loc[curve["val_accuracy"].idxmax()]
        last = curve.iloc[-1]
        if last["val_accuracy"] < best["val_accuracy"] - collapse_drop:
            return (f"{stage}: validation accuracy collapsed from {best['val_accuracy']:.3f} "
                    f"(step {int(best['step'])}) to {last['val_accuracy']:.3f} (step {int(last['step'])})")
        trained = meta.get("steps", 0) + meta.get("ramp_steps", 0)  # a ramped stage's lengths before its own count
        if stall_margin is not None and trained > 0 and "val_chance" in meta \
                and meta["best_val_accuracy"] <= meta["val_chance"] + stall_margin:
            return (f"{stage}: {STALLED} (best validation accuracy {meta['best_val_accuracy']:.3f}, chance "
                    f"{meta['val_chance']:.3f}, after {trained} steps; stopped by {meta['stopped_because']})")
    return None


def convergence(table: pd.DataFrame, min_in_distribution: float | None) -> str | None:
    """Why a run counts as not converged, or None: its mean accuracy over the in-distribution lengths of
    `table` (one evaluation) lies below `min_in_distribution` (None: the rule is off). Such runs are marked
    and left out of means like diverged ones (divergence)."""
    if min_in_distribution is None:
        return None
    inside = float(table.loc[table["in_distribution"], "accuracy"].mean())
    if inside < min_in_distribution:
        return f"mean in-distribution accuracy {inside:.3f} < {min_in_distribution}"
    return None


def with_verdicts(table: pd.DataFrame, curves: dict[str, pd.DataFrame], metas: dict[str, dict],
                  rule: DivergenceRule, first_order: str) -> pd.DataFrame:
    """One run's evaluation `table` with its verdicts: `diverged` and why (`divergence`, from the training
    `curves` and `metas` of its lineage, in training order), `converged` and why not (`convergence`, on the
    `first_order` evaluated), and `retries`, the units of its lineage that needed a retry (retries)."""
    why = divergence(curves, rule.collapse_drop, metas, rule.stall_margin)
    shortfall = convergence(table[table["order"] == first_order], rule.min_in_distribution)
    return table.assign(diverged=why is not None, divergence=why or "", converged=shortfall is None,
                        convergence=shortfall or "", retries=retries(metas))



def retries(metas: dict[str, dict]) -> int:
    """How many units (stages, ramp lengths) of a run's lineage needed a retry under the retry rule (training.attempts),
    from their meta.json: what every table, figure and claim that shows the run discloses."""
    return sum(attempt_count(u) > 1 for m in metas.values() for u in [m, *(m.get("ramp") or [])])


def ood_average(table: pd.DataFrame) -> float:
    """Mean accuracy over out-of-distribution lengths (each length weighted equally), for one run."""
    ood = table.loc[~table["in_distribution"], "accuracy"]
    return float(ood.mean()) if len(ood) else float("nan")

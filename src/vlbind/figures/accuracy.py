"""The accuracy figures (fig3, fig8), the steps to target per unit of the retry rule, and fig7, renderings from the
image bank."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from vlbind.core.files import atomic_write
from vlbind.evaluation.outcomes import ood_average
from vlbind.evaluation.tables import by_order, converged, is_diverged, is_unconverged, ood_summary
from vlbind.figures.base import VARIANT_COLORS, figure, legends_above, save, variants_of


def _train_range(ax, df):
    inside = df.loc[df["in_distribution"], "n_objects"]
    if len(inside):
        ax.axvspan(df["n_objects"].min() - 0.5, inside.max() + 0.5, color="0.92", zorder=0, label="training range")


ORDER_TITLES = {"fixed": "association list in context order", "shuffled": "association list shuffled"}


@figure
def fig3(df: pd.DataFrame, path: str | Path, note: str = "") -> pd.DataFrame:
    panels = by_order(df)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), 5.2), sharey=True, squeeze=False)
    for ax, (order, d) in zip(axes[0], panels):
        _fig3_panel(ax, d)
        ax.set_title(f"Indirect retrieval, {ORDER_TITLES[order]}", fontsize=9)
    axes[0][0].set_ylabel("accuracy (text, query by color)")
    legends_above(axes[0])
    return save(fig, path, " ".join(filter(None, [note, FIG3_RUNS_NOTE])))


def _fig3_panel(ax, df: pd.DataFrame) -> None:
    summary = ood_summary(df)
    _train_range(ax, df)
    used = converged(df)
    for v in variants_of(used):
        d = used[used["variant"] == v].groupby("n_objects")["accuracy"]
        mean, n = d.mean(), d.size()
        se = (d.std(ddof=1) / np.sqrt(n)).fillna(0.0)
        s = summary.loc[v]
        se_text = f" ± {100 * s.ood_se:.1f}" if s.runs > 1 else ""
        label = f"{v}: OOD {100 * s.ood_mean:.1f}%{se_text} ({_runs_used(s)})"
        color = VARIANT_COLORS.get(v)
        ax.plot(mean.index, mean.values, marker="o", ms=3, color=color, label=label)
        ax.fill_between(mean.index, mean - se, mean + se, color=color, alpha=0.25, lw=0)
    n = np.arange(df["n_objects"].min(), df["n_objects"].max() + 1)
    for v in set(variants_of(df)) - set(variants_of(used)):  # every run left out: say so
        ax.plot([], [], color=VARIANT_COLORS.get(v), label=f"{v}: no OOD mean ({_runs_used(summary.loc[v])})")
    ax.plot(n, 1 / n, ls=":", color="0.4", lw=1, label="chance (1 / objects)")
    ax.set_xlabel("number of objects in context")


def _runs_used(s: pd.Series) -> str:
    """'k of n runs': how many of a variant's runs its mean uses (FIG3_RUNS_NOTE says why the others are not), and
    ', r retried' where r of them needed a retry (vlbind.training.attempts)."""
    retried = int(getattr(s, "retried_runs", 0))
    return f"{int(s.runs)} of {int(s.runs + s.diverged_runs + s.unconverged_runs)} runs" + (
        f", {retried} retried" if retried else "")


FIG3_RUNS_NOTE = ("k of n runs: the mean leaves out runs that diverged or did not converge "
                  "(the OOD table says which); r retried: runs whose training retried a stage (our retry rule).")


@figure
def fig8(df: pd.DataFrame, path: str | Path, note: str = "") -> pd.DataFrame:
    variants, rows = variants_of(df), by_order(df)
    fig, axes = plt.subplots(len(rows), len(variants), figsize=(4.0 * len(variants), 3.4 * len(rows)), sharey=True,
                             squeeze=False)
    for (i, (order, rows_of_order)), (j, v) in ((r, c) for r in enumerate(rows) for c in enumerate(variants)):
        ax = axes[i][j]
        _train_range(ax, df)
        d = rows_of_order[rows_of_order["variant"] == v]
        for run, r in d.groupby("run"):
            why = "diverged" if is_diverged(r).iloc[0] else "not converged" if is_unconverged(r).iloc[0] else ""
            retried = "retries" in r and r["retries"].iloc[0] > 0
            marks = ", ".join(filter(None, [why, "retried" if retried else ""]))
            label = f"{run} (OOD {100 * ood_average(r):.1f}%{', ' + marks if marks else ''})"
            ax.plot(r["n_objects"], r["accuracy"], marker="o", ms=2, lw=1, ls="--" if why else "-", label=label)
        ax.set(title=v if len(rows) == 1 else f"{v}, {order}", xlabel="number of objects")
        if j == 0:
            ax.set_ylabel("accuracy")
    legends_above(axes.flat, fontsize=5.5)
    fig.suptitle("Accuracy vs context size, every run", fontsize=10)
    return save(fig, path, note)


def steps_to_target(units: pd.DataFrame, order: list[str], path: str | Path, note: str = "") -> pd.DataFrame:
    """Steps to target per unit (tables.unit_outcomes) across runs, the units in `order` (tables.unit_order), one dot
    a run: filled where the unit passed (its steps, retries included), an x where it did not (the steps it spent),
    ringed where it needed a retry. Not a figure of the paper (the retry rule is ours: training.attempts). Returns what
    it drew."""
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(order) + 1.5), 3.2))
    rank, size = units.groupby("unit").cumcount(), units.groupby("unit")["unit"].transform("size")
    x = units["unit"].map({u: i for i, u in enumerate(order)}) + 0.4 * ((rank + 0.5) / size - 0.5)  # runs side by side
    ok, retried = units["passed"], units["attempts"] > 1
    ax.scatter(x[ok], units.loc[ok, "steps"], s=14, color="C0", label="passed")
    ax.scatter(x[~ok], units.loc[~ok, "steps"], s=18, marker="x", color="C3", label="did not pass")
    ax.scatter(x[retried], units.loc[retried, "steps"], s=60, facecolors="none", edgecolors="k", linewidths=0.6,
               label="retried")
    ax.set_xticks(range(len(order)), order, rotation=60, ha="right", fontsize=6)
    ax.set_ylabel("steps to target (all attempts)")
    ax.set_title(f"{units['run'].nunique()} runs", fontsize=8)
    ax.legend(fontsize=6, frameon=False)
    if note:
        fig.text(0.01, 0.01, note, fontsize=5)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, format="pdf"))
    plt.close(fig)
    return units[["unit", "run", "steps", "passed", "attempts"]]


def fig7(objects: pd.DataFrame, image_dir: Path, path: str | Path, n: int = 24, seed: int = 0) -> pd.DataFrame:
    """A sheet of `n` example images of the bank, each titled with its objects' tokens and shapes."""
    from vlbind.data.render import load_image

    rng = np.random.default_rng(seed)
    images = rng.choice(objects["image"].unique(), size=min(n, objects["image"].nunique()), replace=False)
    cols = 6
    rows = -(-len(images) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(1.8 * cols, 2.0 * rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, image in zip(axes.flat, sorted(images)):
        ax.axis("on")
        ax.set(xticks=[], yticks=[])  # keep the frame: it marks the image's bounds
        ax.imshow(load_image(image_dir, image))
        o = objects[objects["image"] == image]
        ax.set_title("\n".join(f"color{r.color:04d} {r.shape_name}" for r in o.itertuples()), fontsize=5)
    fig.suptitle(f"Rendered context images ({len(objects['image'].unique())} in the bank)", fontsize=9)
    return save(fig, path)

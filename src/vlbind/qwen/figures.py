"""Figures of the pretrained-model experiments: fig2 (LLM vs VLM per generation, Direct and Indirect Retrieval)
and fig6 (one column per generation, a row per task), accuracy by context length, mean ± SE over queries;
fig14 and fig15 (color decodability per layer at the context / association shape token, LLM vs VLM)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from vlbind.figures import registry, save  # noqa: E402

TASK_TITLES = {"direct": "Direct Retrieval", "indirect": "Indirect Retrieval"}
FIGURES: dict = {}  # the figures the Qwen rules draw by name
figure = registry(FIGURES)


def accuracy_by_length(df: pd.DataFrame) -> pd.DataFrame:
    """Mean, SE and count of `correct` per (generation, kind, model, task, n_pairs)."""
    g = df.groupby(["generation", "kind", "model", "task", "n_pairs"])["correct"]
    out = g.agg(["mean", "std", "count"]).reset_index()
    out["se"] = (out["std"].fillna(0.0) / out["count"] ** 0.5)
    return out.drop(columns="std")


def _curve(ax, rows: pd.DataFrame, color, kind: str, label: str) -> None:
    style = "-" if kind == "vlm" else "--"
    ax.plot(rows["n_pairs"], rows["mean"], style, marker="o", ms=3, color=color, label=label)
    ax.fill_between(rows["n_pairs"], rows["mean"] - rows["se"], rows["mean"] + rows["se"], color=color, alpha=0.2)


@figure
def fig2(df: pd.DataFrame, path: str | Path, note: str = "") -> pd.DataFrame:
    acc = accuracy_by_length(df)
    generations = sorted(acc["generation"].unique())
    colors = dict(zip(generations, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, task in zip(axes, TASK_TITLES):
        for (gen, kind, model), rows in acc[acc["task"] == task].groupby(["generation", "kind", "model"]):
            _curve(ax, rows, colors[gen], kind, f"{model} ({kind.upper()})")
        ax.set(title=TASK_TITLES[task], xlabel="context length (pairs)", ylim=(0, 1.02))
    axes[0].set_ylabel("accuracy (output contains the city)")
    axes[1].legend(fontsize=7)
    fig.suptitle("Pretrained LLMs vs VLMs: retrieval in text (solid: VLM, dashed: LLM)", fontsize=9)
    return save(fig, path, note)


@figure
def fig6(df: pd.DataFrame, path: str | Path, note: str = "") -> pd.DataFrame:
    acc = accuracy_by_length(df)
    generations = sorted(acc["generation"].unique())
    fig, axes = plt.subplots(2, len(generations), figsize=(3.6 * len(generations), 6), sharey=True, squeeze=False)
    for col, gen in enumerate(generations):
        for row, task in enumerate(TASK_TITLES):
            ax = axes[row, col]
            mine = acc[(acc["generation"] == gen) & (acc["task"] == task)]
            for (kind, model), rows in mine.groupby(["kind", "model"]):
                _curve(ax, rows, "tab:red" if kind == "vlm" else "tab:blue", kind, f"{model} ({kind.upper()})")
            ax.set(title=f"{gen}: {TASK_TITLES[task]}", xlabel="context length (pairs)", ylim=(0, 1.02))
            ax.legend(fontsize=7)
        axes[0, 0].set_ylabel("accuracy")
        axes[1, 0].set_ylabel("accuracy")
    fig.suptitle("Retrieval per Qwen generation (appendix A)", fontsize=9)
    return save(fig, path, note)


def _probe_figure(df: pd.DataFrame, path, role: str, title: str, note: str) -> pd.DataFrame:
    generations = sorted(df["generation"].unique())
    fig, axes = plt.subplots(1, len(generations), figsize=(4 * len(generations), 3.4), sharey=True, squeeze=False)
    for ax, gen in zip(axes[0], generations):
        mine = df[(df["generation"] == gen) & (df["role"] == role)]
        for (kind, model), rows in mine.groupby(["kind", "model"]):
            ax.plot(rows["layer"], rows["accuracy"], "-" if kind == "vlm" else "--", marker="o", ms=3,
                    color="tab:red" if kind == "vlm" else "tab:blue", label=f"{model} ({kind.upper()})")
            ax.plot(rows["layer"], rows["chance"], ":", color="gray")
        ax.set(title=gen, xlabel="layer (residual stream entering it)", ylim=(0, 1.02))
        ax.legend(fontsize=7)
    axes[0, 0].set_ylabel("color probe accuracy (dotted: chance)")
    fig.suptitle(title, fontsize=9)
    return save(fig, path, note)


@figure
def fig14(df: pd.DataFrame, path: str | Path, note: str = "") -> pd.DataFrame:
    return _probe_figure(df, path, "context shape", "Color decodability at the context shape token (appendix H)", note)


@figure
def fig15(df: pd.DataFrame, path: str | Path, note: str = "") -> pd.DataFrame:
    return _probe_figure(df, path, "association shape",
                         "Color decodability at the association shape token (appendix H)", note)


"""The analyses' figures: interchange label shares (fig4, fig9), attention knockouts (fig10, fig13), probes (fig11,
fig12) and layer relevance, and the marks of runs whose training retried a stage."""

from __future__ import annotations

import textwrap

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from vlbind.figures.base import counted, figure, legends_above, save, variants_of

RETRIED = " (retried)"  # after a run's name in the analyses' figures: its training retried a stage (training.attempts)


def mark_retried(df: pd.DataFrame, retried: set[tuple[str, str]]) -> pd.DataFrame:
    """`df` with the run names of the (variant, run) pairs in `retried` marked RETRIED, so that every analysis
    figure that names a run (titles, legends, rows) says it retried; the figures' footnote names them all
    (retried_note), for the panels that average a variant's runs."""
    return df.assign(run=[f"{r}{RETRIED}" if (v, r) in retried else r for v, r in zip(df["variant"], df["run"])])


def retried_note(retried: set[tuple[str, str]]) -> str:
    """The footnote line naming the runs whose training retried a stage; empty where none did."""
    runs = ", ".join(f"{v}/{r}" for v, r in sorted(retried))
    return f"Retried (our retry rule; vlbind.training.attempts): {runs}." if retried else ""


LABEL_COLORS = {"positional": "tab:blue", "color_key": "tab:green", "shape_key": "tab:olive",
                "reflexive": "tab:purple", "no_effect": "0.8", "mixed": "tab:red"}


def _label_bars(ax, shares: pd.DataFrame) -> None:
    """Stacked bars of label shares per layer; shares: index layer, columns labels."""
    bottom = np.zeros(len(shares))
    for label, color in LABEL_COLORS.items():
        if label in shares:
            ax.bar(shares.index, shares[label], bottom=bottom, color=color, label=label, width=0.85)
            bottom += shares[label].to_numpy()
    ax.set(xlabel="layer (residual stream entering it)", ylim=(0, 1.02))


def _shares(df: pd.DataFrame) -> pd.DataFrame:
    return df.pivot_table(index="layer", columns="label", values="fraction", aggfunc="mean").fillna(0.0)


def _label_position(c) -> str:
    """The position a circuits.csv row's label was read at ([ANSWER] where it read none: the paper's)."""
    position = getattr(c, "label_position", None)
    return position if isinstance(position, str) else "answer"


def _at(df: pd.DataFrame, position: str) -> pd.DataFrame:
    return df[df["position"] == position] if "position" in df else df


@figure
def fig4(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    """Label shares per layer, a panel per variant (mean over its runs), patched where the runs' labels were read
    (circuits.csv's label_position; [ANSWER] without one); where a variant's runs carry different circuit labels
    or were read at different positions, a panel per label and position, so that runs that disagree are not
    averaged into one picture."""
    labels = {} if circuits is None else {(r.variant, r.run): (r.circuit, _label_position(r))
                                          for r in circuits.itertuples()}
    panels = []
    for v in variants_of(df):
        d = df[df["variant"] == v]
        by_label: dict[tuple[str, str], list[str]] = {}
        for run in d["run"].unique():
            by_label.setdefault(labels.get((v, run), ("", "answer")), []).append(run)
        for (label, position), rs in by_label.items():
            title = v if len(by_label) == 1 else f"{v}: {label} ({', '.join(rs)})"
            panels.append((title, position, _at(d[d["run"].isin(rs)], position)))
    width, cols = 3.6, min(4, len(panels))  # rows of at most four panels, as fig9
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, 3.4 * rows + 0.8), sharey=True, squeeze=False)
    for ax in axes.flat[len(panels):]:
        ax.axis("off")
    for ax, (title, position, d) in zip(axes.flat, panels):
        _label_bars(ax, _shares(d))
        kept = d.groupby("run")["pairs_kept"].first().sum()
        runs = counted(d["run"].nunique(), "run")
        ax.set_title(f"{textwrap.fill(title, int(width * 14))}\npatched at {position}; {runs}, {kept} pairs",
                     fontsize=7)
    legends_above([axes[0][0]], ncol=3)  # shared y: every panel keeps the band
    for row in axes:
        row[0].set_ylabel("share of patched answers")
    return save(fig, path, note)


@figure
def fig9(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    """Label shares per layer per run, patched where its label was read (circuits.csv's label_position)."""
    runs = df[["variant", "run"]].drop_duplicates().to_numpy().tolist()
    cols = min(4, len(runs))
    rows = -(-len(runs) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.6 * rows), sharey=True, squeeze=False)
    for ax in axes.flat[len(runs):]:
        ax.axis("off")
    labels = {} if circuits is None else {(r.variant, r.run): r for r in circuits.itertuples()}
    for ax, (v, run) in zip(axes.flat, runs):
        c = labels.get((v, run))
        position = "answer" if c is None else _label_position(c)
        _label_bars(ax, _shares(_at(df[(df["variant"] == v) & (df["run"] == run)], position)))
        weak = " (weak)" if c is not None and str(getattr(c, "weak", "")) == "True" else ""  # csv: True, False or empty
        spike = "no spike" if c is None or pd.isna(c.spike_layer) else f"first spike at layer {int(c.spike_layer)}"
        extra = "" if c is None else f"\n{c.circuit}{weak}, {spike}"
        ax.set_title(f"{v} / {run}, patched at {position}{extra}", fontsize=7)
    legends_above([axes.flat[0]], fontsize=5, ncol=3)  # shared y: every panel keeps the band
    fig.suptitle("Interchange interventions per run", fontsize=9)
    return save(fig, path, note)


@figure
def fig10(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    variants = variants_of(df)
    fig, axes = plt.subplots(2, len(variants), figsize=(3.8 * len(variants), 6.6), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    for k, v in enumerate(variants):
        d = df[df["variant"] == v]
        role = d[d["kind"] == "role"].pivot_table(index="source", columns="target", values="drop", aggfunc="mean")
        order = list(dict.fromkeys(d["source"]))  # the order of vlbind.interp.prompts.ROLES
        role = role.reindex(index=[r for r in order if r in role.index],
                            columns=[r for r in order if r in role.columns])
        sns.heatmap(role, ax=axes[0][k], cmap="Reds", vmin=0, vmax=max(0.05, float(np.nanmax(role.to_numpy()))),
                    annot=True, fmt=".2f", annot_kws={"fontsize": 5}, cbar=False)
        base = d["baseline"].mean()
        axes[0][k].set_title(f"{v}: accuracy drop (baseline {base:.2f})", fontsize=8)
        axes[0][k].set(xlabel="target (attended to)", ylabel="source (attends)")
        m = d[d["kind"] == "matching"].groupby(["source", "target"], sort=False)["drop"].mean()
        axes[1][k].barh([f"{s} -> {t}" for s, t in m.index], m.to_numpy(), color="tab:red")
        axes[1][k].set(xlabel="accuracy drop", title="matching edges (same object)")
        axes[1][k].tick_params(labelsize=6)
    fig.suptitle("Attention knockouts, all layers", fontsize=9)
    return save(fig, path, note)


@figure
def fig11(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    variants, roles = variants_of(df), list(dict.fromkeys(df["role"]))
    attr_colors = {"slot": "tab:blue", "color": "tab:green", "shape": "tab:olive", "item": "tab:purple"}
    fig, axes = plt.subplots(len(variants), len(roles), figsize=(2.4 * len(roles), 2.1 * len(variants)),
                             sharey=True, sharex=True, squeeze=False)
    for i, v in enumerate(variants):
        for j, role in enumerate(roles):
            ax = axes[i][j]
            d = df[(df["variant"] == v) & (df["role"] == role)]
            for attr, color in attr_colors.items():
                a = d[d["attribute"] == attr].groupby("layer")[["accuracy", "chance"]].mean()
                ax.plot(a.index, a["accuracy"], color=color, lw=1, label=attr)
                ax.plot(a.index, a["chance"], color=color, lw=0.6, ls=":")
            ax.set_ylim(0, 1.02)
            if i == 0:
                ax.set_title(role, fontsize=8)
            if j == 0:
                ax.set_ylabel(f"{v}\ndecodable", fontsize=7)
    axes[0][-1].legend(fontsize=6)
    for ax in axes[-1]:
        ax.set_xlabel("layer")
    fig.suptitle("Linear probes: what each position's residual stream holds (dotted: chance)", fontsize=9)
    return save(fig, path, note)


@figure
def fig12(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    variants = variants_of(df)
    roles = ["context shape", "association shape"]
    fig, axes = plt.subplots(len(roles), len(variants), figsize=(3.4 * len(variants), 2.6 * len(roles)),
                             sharey=True, squeeze=False)
    for j, v in enumerate(variants):
        for i, role in enumerate(roles):
            d = df[(df["variant"] == v) & (df["role"] == role) & (df["attribute"] == "color")]
            for run, r in d.groupby("run"):
                axes[i][j].plot(r["layer"], r["accuracy"] - r["chance"], lw=1, label=run)
            axes[i][j].set(ylim=(-0.05, 1.0), title=f"{v}: color at {role}", xlabel="layer")
            axes[i][j].title.set_fontsize(8)
        axes[0][j].legend(fontsize=5)
    for ax in axes[:, 0]:
        ax.set_ylabel("probe accuracy - chance")
    fig.suptitle("Binding signature per run", fontsize=9)
    return save(fig, path, note)


@figure
def fig13(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    d = df[df["kind"] == "matching"].copy()
    d["edge"] = d["source"] + " -> " + d["target"]
    d["model"] = d["variant"] + " / " + d["run"]
    table = d.pivot_table(index="model", columns="edge", values="drop", aggfunc="mean", sort=False)
    fig, ax = plt.subplots(figsize=(1.0 * table.shape[1] + 3, 0.35 * table.shape[0] + 2))
    sns.heatmap(table, ax=ax, cmap="Reds", vmin=0, annot=True, fmt=".2f", annot_kws={"fontsize": 6})
    ax.set(xlabel="", ylabel="")
    ax.tick_params(labelsize=6)
    ax.set_title("Matching-edge knockouts per run (accuracy drop)", fontsize=9)
    return save(fig, path, note)


@figure
def fig_layer_relevance(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    variants = variants_of(df)
    fig, axes = plt.subplots(1, len(variants), figsize=(3.6 * len(variants), 3.2), squeeze=False)
    for ax, v in zip(axes[0], variants):
        d = df[df["variant"] == v]
        for run, r in d.groupby("run"):
            ax.scatter(r["cosine"], r["drop"], s=12, label=run)
        rho = d.groupby("run")["spearman_cosine_drop"].first()
        ax.set(xlabel="cos(block input, block output)", title=f"{v}: Spearman {rho.mean():+.2f} (mean over runs)")
        ax.title.set_fontsize(8)
    axes[0][0].set_ylabel("accuracy drop when the block is skipped")
    axes[0][-1].legend(fontsize=6)
    fig.suptitle("Layer relevance: similarity vs removal", fontsize=9)
    return save(fig, path, note)

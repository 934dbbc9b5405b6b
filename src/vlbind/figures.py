"""Figures from tidy result tables; nothing here touches a model.

fig3: text-modality accuracy vs number of objects, mean +- standard error over runs per variant, the
training range shaded, each variant's OOD average (mean over runs of the per-run OOD average) in the legend;
one panel per association-list order evaluated (evaluate.orders).
Runs marked diverged or not converged by the evaluation (outcomes.divergence, outcomes.convergence) are left
out of means; the legend counts the runs a mean uses ("k of n runs"), the footnote says why the others are not.
fig7: example renderings from the image bank.
fig8: one panel per variant (and row per order) with every run drawn individually (appendix E), runs left out of
means dashed.
fig4 / fig9: interchange label shares per layer, per variant (mean over runs) / per run with its circuit.
fig10: attention-knockout accuracy drops per variant (role x role matrix, and appendix G's matching edges).
fig11: probe decodability per layer, one panel per role, per variant (color of the bound object).
fig12 / fig13: the same patterns run by run (appendix G, "consistent across experimental runs"): the
binding signature of the probes (color at context shape and association shape) / matching-edge knockouts.
fig_layer_relevance: per block, input/output cosine similarity vs the accuracy drop when it is skipped.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from vlbind.core.files import atomic_write  # noqa: E402
from vlbind.evaluation.outcomes import ood_average  # noqa: E402
from vlbind.evaluation.tables import VARIANT_ORDER, by_order, converged, is_diverged, is_unconverged, ood_summary  # noqa: E402

VARIANT_COLORS = dict(zip(VARIANT_ORDER, sns.color_palette("tab10", len(VARIANT_ORDER))))


# The figures a rule draws by name from tidy tables, registered where each is defined (fig7 draws from the
# image bank: rule fig7; the Qwen figures: qwen.figures).
def registry(figures: dict):
    """A decorator that registers a figure function in `figures` under its name, where it is defined."""
    def register(fn):
        figures[fn.__name__] = fn
        return fn
    return register


FIGURES: dict = {}
figure = registry(FIGURES)


def _variants(df):
    present = set(df["variant"])
    return [v for v in VARIANT_ORDER if v in present] + sorted(present - set(VARIANT_ORDER))


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
    _legends_above(axes[0])
    return save(fig, path, " ".join(filter(None, [note, FIG3_RUNS_NOTE])))


def _fig3_panel(ax, df: pd.DataFrame) -> None:
    summary = ood_summary(df)
    _train_range(ax, df)
    used = converged(df)
    for v in _variants(used):
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
    for v in set(_variants(df)) - set(_variants(used)):  # every run left out: say so
        ax.plot([], [], color=VARIANT_COLORS.get(v), label=f"{v}: no OOD mean ({_runs_used(summary.loc[v])})")
    ax.plot(n, 1 / n, ls=":", color="0.4", lw=1, label="chance (1 / objects)")
    ax.set_xlabel("number of objects in context")


def _legends_above(axes, fontsize: float = 6, ncol: int = 2) -> None:
    """Each panel's legend in a band above accuracy 1, where no data is, so that it never covers a curve; in `ncol`
    columns, or fewer where that many would be wider than the panel. Called once a figure's panels are drawn: one
    layout gives every panel's width (a legend inside its panel does not change it)."""
    fig = axes[0].figure
    fig.tight_layout()  # the panels' widths as save() will lay them out, near enough
    renderer = fig.canvas.get_renderer()
    for ax in axes:
        entries = len(ax.get_legend_handles_labels()[1])
        for cols in range(ncol, 0, -1):
            rows = -(-entries // cols)
            height = ax.get_position().height * fig.get_size_inches()[1] * 0.85  # inches, less what layout takes
            band = (rows * 1.4 * fontsize + 4) / 72  # inches the legend takes
            top = 1.03 * height / (height - band)
            if ax.get_autoscaley_on() or ax.get_ylim()[1] < top:  # shared y axes: the panel with the most rows decides
                ax.set(ylim=(0, top))
            legend = ax.legend(fontsize=fontsize, loc="upper center", ncol=cols, frameon=False, borderaxespad=0.2,
                               columnspacing=0.8)
            if legend.get_window_extent(renderer).width <= 0.95 * ax.get_window_extent(renderer).width:
                break
        ax.set_yticks(np.linspace(0, 1, 5))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


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
    variants, rows = _variants(df), by_order(df)
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
    _legends_above(axes.flat, fontsize=5.5)
    fig.suptitle("Accuracy vs context size, every run", fontsize=10)
    return save(fig, path, note)


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
    for v in _variants(df):
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
        runs = _count(d["run"].nunique(), "run")
        ax.set_title(f"{textwrap.fill(title, int(width * 14))}\npatched at {position}; {runs}, {kept} pairs",
                     fontsize=7)
    _legends_above([axes[0][0]], ncol=3)  # shared y: every panel keeps the band
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
    _legends_above([axes.flat[0]], fontsize=5, ncol=3)  # shared y: every panel keeps the band
    fig.suptitle("Interchange interventions per run", fontsize=9)
    return save(fig, path, note)


@figure
def fig10(df: pd.DataFrame, path, note: str = "", circuits: pd.DataFrame | None = None) -> pd.DataFrame:
    variants = _variants(df)
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
    variants, roles = _variants(df), list(dict.fromkeys(df["role"]))
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
    variants = _variants(df)
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
    variants = _variants(df)
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


FOOTNOTE_PT = 6.5  # the footnote's font size; a line of it takes FOOTNOTE_PT * 1.5 / 72 inches


def save(fig, path, note: str = "") -> pd.DataFrame:
    """Lay out `fig` with `note` (the config's figure note: the scale it was run at) as a footnote along its
    bottom edge, write it to `path` atomically (its format from the suffix), close it and return what it drew
    (`plotted`, with attrs `layout` and `legends`, each legend's entries): every figure function returns that, so
    tests check the data, not just a file header. What each variant was trained on is the report caption's
    (captions.training_note), not the figure's."""
    path = Path(path)
    bottom = 0.0
    if note:
        width, height = fig.get_size_inches()
        text = textwrap.fill(note, max(40, int(width * 72 / (FOOTNOTE_PT * 0.5))))  # ~half an em per character
        fig.text(0.005, 0.005, text, fontsize=FOOTNOTE_PT, color="0.3", ha="left", va="bottom")
        bottom = (text.count("\n") + 1) * FOOTNOTE_PT * 1.5 / 72 / height
    fig.tight_layout(rect=(0, bottom, 1, 1))
    drawn = plotted(fig)
    drawn.attrs["layout"] = layout(fig)
    drawn.attrs["note"] = note
    drawn.attrs["legends"] = [[t.get_text() for t in ax.get_legend().get_texts()]
                              for ax in fig.axes if ax.get_legend() is not None]  # per panel with one
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=path.suffix.lstrip(".")))
    plt.close(fig)
    return drawn


def layout(fig) -> dict:
    """How much of the figure its plots take: `axes_height` (from the lowest panel's bottom to the highest's top)
    and `axes_area` (the box around every panel, colorbars left out), each a fraction of the figure's;
    `legend_bottom`, the lowest legend's bottom edge in its panel's data coordinates; and `legend_overhang`, the
    most inches a legend reaches past its panel's left or right edge (<= 0: every legend within its panel)."""
    fig.canvas.draw()
    boxes = [ax.get_position() for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.axison]
    height = max(b.y1 for b in boxes) - min(b.y0 for b in boxes)
    with_legend = [ax for ax in fig.axes if ax.get_legend() is not None]
    legends = [ax.transData.inverted().transform(ax.get_legend().get_window_extent())[0, 1] for ax in with_legend]
    overhang = [max(a.x0 - leg.x0, leg.x1 - a.x1) / fig.dpi for a, leg in
                ((ax.get_window_extent(), ax.get_legend().get_window_extent()) for ax in with_legend)]
    return {"axes_area": (max(b.x1 for b in boxes) - min(b.x0 for b in boxes)) * height, "axes_height": height,
            "legend_bottom": min(legends, default=float("nan")),
            "legend_overhang": max(overhang, default=float("nan"))}


def plotted(fig) -> pd.DataFrame:
    """The data a figure shows, one row per point: panel (axes index), title, kind (line, bar, scatter or cell),
    series (the artist's legend label; a heatmap cell's row), x, y (a cell: its column and value)."""
    rows = []
    for panel, ax in enumerate(fig.axes):
        points = []
        for line in ax.get_lines():
            points += [("line", line.get_label(), x, y) for x, y in zip(line.get_xdata(), line.get_ydata())]
        for bars in ax.containers:  # vertical bars: (center, height); horizontal ones: (center, width)
            points += [("bar", bars.get_label(), b.get_x() + b.get_width() / 2, b.get_height())
                       if bars.orientation == "vertical" else
                       ("bar", bars.get_label(), b.get_y() + b.get_height() / 2, b.get_width()) for b in bars]
        ys, xs = ax.get_yticklabels(), ax.get_xticklabels()
        for coll in ax.collections:
            if isinstance(coll, matplotlib.collections.QuadMesh) and coll.get_array().size == len(ys) * len(xs):
                values = np.ma.filled(coll.get_array().astype(float), np.nan).reshape(len(ys), len(xs))
                points += [("cell", r.get_text(), c.get_text(), values[i, j])  # a heatmap (not its colorbar)
                           for i, r in enumerate(ys) for j, c in enumerate(xs)]
            elif isinstance(coll, matplotlib.collections.PathCollection):
                points += [("scatter", coll.get_label(), x, y) for x, y in coll.get_offsets()]
        rows += [(panel, ax.get_title(), *point) for point in points]
    return pd.DataFrame(rows, columns=["panel", "title", "kind", "series", "x", "y"])


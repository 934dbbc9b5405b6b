"""What every figure shares: the registry of figures drawn by name (`@figure`), the variants' colors and order, the
legends above the curves, and `save`, which writes a figure with its footnote atomically and returns what it drew
(`plotted`)."""

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
from vlbind.evaluation.tables import VARIANT_ORDER  # noqa: E402

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


def variants_of(df):
    present = set(df["variant"])
    return [v for v in VARIANT_ORDER if v in present] + sorted(present - set(VARIANT_ORDER))


def legends_above(axes, fontsize: float = 6, ncol: int = 2) -> None:
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


def counted(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


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

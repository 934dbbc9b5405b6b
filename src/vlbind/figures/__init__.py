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

The package: `base` (the registry, `save`), `accuracy` (fig3, fig8, fig7, steps to target), `analyses` (fig4,
fig9-13, layer relevance). Importing it registers every figure in FIGURES; its figures are named here too.
"""

from vlbind.figures.accuracy import fig3, fig7, fig8, steps_to_target
from vlbind.figures.analyses import (
    LABEL_COLORS,
    RETRIED,
    fig4,
    fig9,
    fig10,
    fig11,
    fig12,
    fig13,
    fig_layer_relevance,
    mark_retried,
    retried_note,
)
from vlbind.figures.base import FIGURES, figure, plotted, registry, save

__all__ = ["FIGURES", "LABEL_COLORS", "RETRIED", "fig3", "fig4", "fig7", "fig8", "fig9", "fig10", "fig11", "fig12",
           "fig13", "fig_layer_relevance", "figure", "mark_retried", "plotted", "registry", "retried_note", "save",
           "steps_to_target"]

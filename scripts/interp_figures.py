"""Snakemake adapter: the figures of the mechanistic analyses (fig4, fig9-fig13, fig_layer_relevance), each from
the tables of the analysis it draws (params.analyses); runs whose training retried a stage (circuits.csv's
`retries`) marked in every figure (figures.mark_retried) and named in the footnote."""
import pandas as pd

from vlbind import figures
from vlbind.core.logs import setup_logging

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
circuits = pd.read_csv(sm.input.circuits)
retried = {(v, r) for v, r, n in zip(circuits["variant"], circuits["run"], circuits["retries"]) if n > 0}
note = " ".join(filter(None, [sm.params.note, figures.retried_note(retried)]))
circuits = figures.mark_retried(circuits, retried)
tables = {}
for fig, analysis in sm.params.analyses.items():
    if analysis not in tables:
        table = pd.concat([pd.read_parquet(p) for p in sm.input[analysis]], ignore_index=True)
        tables[analysis] = figures.mark_retried(table, retried)
    figures.FIGURES[fig](tables[analysis], sm.output[fig], note=note, circuits=circuits)
    log.info("wrote %s from %d %s tables", sm.output[fig], len(sm.input[analysis]), analysis)

"""Snakemake adapter: the figures of the mechanistic analyses (fig4, fig9-fig13, fig_layer_relevance), each from
the tables of the analysis it draws (params.analyses)."""
import pandas as pd

from vlbind import figures
from vlbind.logs import setup_logging

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
circuits = pd.read_csv(sm.input.circuits)
tables = {}
for fig, analysis in sm.params.analyses.items():
    if analysis not in tables:
        tables[analysis] = pd.concat([pd.read_parquet(p) for p in sm.input[analysis]], ignore_index=True)
    figures.FIGURES[fig](tables[analysis], sm.output[fig], note=sm.params.note, circuits=circuits)
    log.info("wrote %s from %d %s tables", sm.output[fig], len(sm.input[analysis]), analysis)

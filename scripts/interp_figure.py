"""Snakemake adapter: a figure of the mechanistic analyses (fig4, fig9, fig10, fig11, fig_layer_relevance)."""
import pandas as pd

from vlbind import figures
from vlbind.logs import setup_logging

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
df = pd.concat([pd.read_parquet(p) for p in sm.input.tables], ignore_index=True)
figures.FIGURES[sm.wildcards.fig](df, sm.output.pdf, note=sm.params.note, circuits=pd.read_csv(sm.input.circuits))
log.info("wrote %s from %d tables", sm.output.pdf, len(sm.input.tables))

"""Snakemake adapter: the Qwen figures a rule names as outputs (fig2, fig6 from the retrieval tables; fig14, fig15
from the probe tables)."""
import pandas as pd

from vlbind.core.logs import setup_logging
from vlbind.qwen import figures

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
df = pd.concat([pd.read_parquet(p) for p in sm.input.tables], ignore_index=True)
for fig, pdf in sm.output.items():
    figures.FIGURES[fig](df, pdf, note=sm.params.note)
    log.info("wrote %s from %d tables", pdf, len(sm.input.tables))

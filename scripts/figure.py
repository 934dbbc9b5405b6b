"""Snakemake adapter: draw every figure the rule names as an output (fig3, fig8) from the evaluation tables."""
from vlbind import figures
from vlbind.core.logs import setup_logging
from vlbind.evaluation import tables

sm = snakemake  # noqa: F821
log = setup_logging(sm.log[0])
df = tables.read_eval_tables(sm.input.tables)
for fig, pdf in sm.output.items():
    figures.FIGURES[fig](df, pdf, note=sm.params.note)
    log.info("wrote %s from %d tables", pdf, len(sm.input.tables))

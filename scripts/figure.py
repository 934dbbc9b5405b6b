"""Snakemake adapter: draw the figure named by the rule (fig3, fig8) from evaluation tables."""
from vlbind import figures, tables
from vlbind.logs import setup_logging

sm = snakemake  # noqa: F821
log = setup_logging(sm.log[0])
df = tables.read_eval_tables(sm.input.tables)
figures.FIGURES[sm.rule](df, sm.output.pdf, note=sm.params.note)
log.info("wrote %s from %d tables", sm.output.pdf, len(sm.input.tables))

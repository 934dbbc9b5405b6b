"""Snakemake adapter: the many-seed table of a stage's lineage (pass fractions, steps to target per unit) and its
figure."""
from vlbind import figures
from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.evaluation import tables

sm = snakemake  # noqa: F821
log = setup_logging(sm.log[0])
units = tables.unit_outcomes(sm.input.meta)
table = tables.seed_table(units, sm.params.stages)
atomic_write(sm.output.csv, lambda tmp: table.to_csv(tmp, index=False))
figures.steps_to_target(units, tables.unit_order(units, sm.params.stages), sm.output.pdf, sm.params.note)
log.info("\n%s", table.to_string())

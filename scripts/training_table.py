"""Snakemake adapter: steps, best validation accuracy, stop reason and wall time of every trained stage."""
from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.evaluation import tables

sm = snakemake  # noqa: F821
log = setup_logging(sm.log[0])
table = tables.training_summary(sm.input.meta)
atomic_write(sm.output.csv, lambda tmp: table.to_csv(tmp, index=False))
log.info("\n%s", table.to_string())

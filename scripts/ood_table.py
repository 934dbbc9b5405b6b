"""Snakemake adapter: OOD averages per prompt order and variant (mean and SE over runs) as CSV."""
from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.evaluation import tables

sm = snakemake  # noqa: F821
log = setup_logging(sm.log[0])
summary = tables.ood_table(tables.read_eval_tables(sm.input.tables))
atomic_write(sm.output.csv, lambda tmp: summary.to_csv(tmp))
log.info("\n%s", summary.to_string())

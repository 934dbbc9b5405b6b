"""Snakemake adapter: the claims table (vlbind.evaluation.claims) from the evaluation tables and circuits.csv."""
import pandas as pd

from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.evaluation import claims, tables

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
table = claims.claims_table(tables.read_eval_tables(sm.input.tables), pd.read_csv(sm.input.circuits))
atomic_write(sm.output.csv, lambda tmp: table.to_csv(tmp, index=False))
log.info("\n%s", table[["claim", "n", "diff", "verdict"]].to_string())

"""Snakemake adapter: the circuit label of every analysed run (interp.circuits.circuit_label)."""
import pandas as pd

from vlbind.files import atomic_write
from vlbind.interp.circuits import CircuitRule, circuit_label
from vlbind.logs import setup_logging
from vlbind.settings import from_dict

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
rule = from_dict(CircuitRule, dict(sm.params.circuits))
rows = []
for ic_path, pr_path in zip(sm.input.interchange, sm.input.probes):
    ic, pr = pd.read_parquet(ic_path), pd.read_parquet(pr_path)
    label = circuit_label(ic, pr, rule)
    rows.append({"variant": ic["variant"].iloc[0], "run": ic["run"].iloc[0], **label})
table = pd.DataFrame(rows)
atomic_write(sm.output.csv, lambda tmp: table.to_csv(tmp, index=False))
log.info("\n%s", table.to_string())

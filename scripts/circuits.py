"""Snakemake adapter: the circuit label of every analysed run (interp.circuits.circuit_label), with `retries`, the
units of its lineage that needed a retry (from its evaluation table: outcomes.retries)."""
import pandas as pd

from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.core.settings import from_dict
from vlbind.interp.circuits import CircuitRule, circuit_label

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
rule = from_dict(CircuitRule, dict(sm.params.circuits))
retries = {}
for path in sm.input.evals:
    ev = pd.read_parquet(path, columns=["variant", "run", "retries"])
    retries[ev["variant"].iloc[0], ev["run"].iloc[0]] = int(ev["retries"].max())
rows = []
for ic_path, pr_path in zip(sm.input.interchange, sm.input.probes):
    ic, pr = pd.read_parquet(ic_path), pd.read_parquet(pr_path)
    label = circuit_label(ic, pr, rule)
    key = (ic["variant"].iloc[0], ic["run"].iloc[0])
    rows.append({"variant": key[0], "run": key[1], **label, "retries": retries[key]})
table = pd.DataFrame(rows)
atomic_write(sm.output.csv, lambda tmp: table.to_csv(tmp, index=False))
log.info("\n%s", table.to_string())

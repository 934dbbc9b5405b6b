"""Snakemake adapter: accuracy by prompt order and number of objects for one trained model -> tidy parquet, with
the run's divergence verdict (from the training curves of its whole lineage) and its convergence verdict (on the
first order evaluated)."""
from pathlib import Path

import pandas as pd

from vlbind.core.device import job_device
from vlbind.core.files import atomic_write, read_json
from vlbind.core.logs import setup_logging
from vlbind.core.settings import from_dict
from vlbind.evaluation.evaluate import EvalConfig, evaluate
from vlbind.evaluation.outcomes import DivergenceRule, ood_average, with_verdicts
from vlbind.model.checkpoint import load_model
from vlbind.params import job_section

sm = snakemake  # noqa: F821
log = setup_logging(sm.log[0])
device, precision = job_device(sm.params.device, sm.threads, sm.params.precision)
model, meta = load_model(Path(sm.input.model).parent, device)
cfg = from_dict(EvalConfig, job_section(sm.params.evaluate, sm.config, "evaluate"))
table = evaluate(model, cfg, device, precision)
table.insert(0, "run", sm.wildcards.run)
table.insert(0, "variant", sm.wildcards.variant)
table["seed"] = meta["train_config"]["seed"]
curves = {Path(p).parent.name: pd.read_parquet(p) for p in sm.input.curves}
metas = {Path(p).parent.name: read_json(p, "model meta.json") for p in sm.input.metas}
rule = from_dict(DivergenceRule, dict(sm.params.divergence))
table = with_verdicts(table, curves, metas, rule, cfg.orders[0])
atomic_write(Path(sm.output.table), lambda tmp: table.to_parquet(tmp, index=False))
first = table.iloc[0]
marks = (f" (DIVERGED: {first.divergence})" if first.diverged else "") + (
    f" (NOT CONVERGED: {first.convergence})" if not first.converged else "")
ood = ", ".join(f"{o} {ood_average(t):.4f}" for o, t in table.groupby("order", sort=False))
log.info("%s %s: OOD average %s%s\n%s", sm.wildcards.variant, sm.wildcards.run, ood, marks, table.to_string())

"""Snakemake adapter: accuracy by number of objects for one trained model -> tidy parquet."""
from pathlib import Path

import torch

from vlbind import config as vlconfig
from vlbind.checkpoint import atomic_write, load_model
from vlbind.cli import setup_logging
from vlbind.evaluate import EvalConfig, evaluate, ood_average

sm = snakemake  # noqa: F821
log = setup_logging(sm.log[0])
torch.set_num_threads(sm.threads)
device = vlconfig.resolve_device(sm.params.device)
model, meta = load_model(Path(sm.input.model).parent, device)
table = evaluate(model, EvalConfig(**sm.params.evaluate), device, vlconfig.precision_for(sm.params.precision, device))
table.insert(0, "run", sm.wildcards.run)
table.insert(0, "variant", sm.wildcards.variant)
table["seed"] = meta["train_config"]["seed"]
atomic_write(Path(sm.output.table), lambda tmp: table.to_parquet(tmp, index=False))
log.info("%s %s: OOD average %.4f\n%s", sm.wildcards.variant, sm.wildcards.run, ood_average(table), table.to_string())

"""Snakemake adapter: one mechanistic analysis (interchange, knockout, probes, layer_relevance) of one
trained model -> a tidy parquet table tagged with variant and run."""
from pathlib import Path

import torch

from vlbind import config as vlconfig
from vlbind.checkpoint import load_model
from vlbind.cli import setup_logging
from vlbind.files import atomic_write
from vlbind.interp import interchange, knockout, layer_relevance, probes

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
torch.set_num_threads(sm.threads)
device = vlconfig.resolve_device(sm.params.device)
model, _ = load_model(Path(sm.input.model).parent, device)
s, analysis = dict(sm.params.settings), sm.wildcards.analysis
if analysis == "interchange":
    table, info = interchange.sweep(model, s["pairs"], s["seed"], device=device)
    table["pairs_generated"], table["pairs_kept"] = info["generated"], info["kept"]
    log.info("interchange pairs: %s (dropped: the model fails the original or the counterfactual)", info)
elif analysis == "knockout":
    table = knockout.knockout_table(model, s["prompts"], s["seed"], device)
elif analysis == "probes":
    table = probes.probe_table(model, probes.ProbeConfig(**s), device)
else:
    table, rho = layer_relevance.layer_relevance_table(model, s["prompts"], s["seed"], device)
    table["spearman_cosine_drop"] = rho
    log.info("Spearman(cosine, skip drop) = %.3f", rho)
table.insert(0, "run", sm.wildcards.run)
table.insert(0, "variant", sm.wildcards.variant)
atomic_write(Path(sm.output.table), lambda tmp: table.to_parquet(tmp, index=False))
log.info("%s %s %s:\n%s", analysis, sm.wildcards.variant, sm.wildcards.run, table.to_string())

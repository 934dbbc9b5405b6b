"""Snakemake adapter: every mechanistic analysis (interchange, knockout, probes, layer_relevance) of one trained
model, loaded once -> one tidy parquet table per analysis, tagged with variant and run."""
from pathlib import Path

from vlbind.core.device import job_device
from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.interp import analyze, settings
from vlbind.model.checkpoint import load_model

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
device, precision = job_device(sm.params.device, sm.threads, sm.params.precision)
model, _ = load_model(Path(sm.input.model).parent, device)
variant, run = sm.wildcards.variant, sm.wildcards.run
for analysis, section in sm.params.settings.items():
    table, summary = analyze(analysis, model, settings(analysis, dict(section)), device, sm.params.order, precision)
    log.info("%s: %s", analysis, summary)
    table.insert(0, "run", run)
    table.insert(0, "variant", variant)
    table["order"] = sm.params.order
    atomic_write(Path(sm.output[analysis]), lambda tmp, t=table: t.to_parquet(tmp, index=False))
    log.info("%s %s %s:\n%s", analysis, variant, run, table.to_string())

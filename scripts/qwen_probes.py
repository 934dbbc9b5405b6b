"""Snakemake adapter: color probes at the shape tokens of one pretrained Qwen model (Fig 14, Fig 15)."""
from vlbind.device import job_device
from vlbind.files import atomic_write
from vlbind.logs import setup_logging
from vlbind.qwen import jobs, models
from vlbind.qwen.probes import QwenProbeConfig, probe_table
from vlbind.qwen.prompts import Chat

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
device, _ = job_device(sm.params.device, sm.threads)  # the weights' dtype: jobs.for_job logs it
spec = models.QwenModel.from_dict(sm.params.model)
model, tok = jobs.for_job(spec, sm.params.tiny, sm.params.dtype, device)
table = probe_table(model, tok, QwenProbeConfig.from_dict(sm.params.probes), Chat.from_dict(sm.params.chat), device)
table = jobs.with_model_columns(table, sm.wildcards.model, spec, sm.params.tiny)
atomic_write(sm.output.table, lambda tmp: table.to_parquet(tmp, index=False))
log.info("wrote %s", sm.output.table)

"""Snakemake adapter: the mechanistic analyses of one pretrained Qwen model (or its tiny stand-in), loaded once:
interchange interventions on the boxes task (Table 1) and color probes at the shape tokens (Fig 14, Fig 15)."""
from vlbind.core.device import job_device
from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.params import job_section
from vlbind.qwen import jobs, models
from vlbind.qwen.binding import BindingConfig, interchange, make_pairs, their_chat
from vlbind.qwen.probes import QwenProbeConfig, probe_table
from vlbind.qwen.prompts import Chat

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
device, _ = job_device(sm.params.device, sm.threads)  # the weights' dtype: jobs.for_job logs it
spec = models.QwenModel.from_dict(sm.params.model)
model, tok = jobs.for_job(spec, sm.params.tiny, sm.params.dtype, device)
chat = Chat.from_dict(sm.params.chat)

cfg = BindingConfig.from_dict(job_section(sm.params.binding, sm.config, "qwen.binding"))
table = interchange(model, tok, make_pairs(cfg.n_entries, cfg.pairs, cfg.seed), their_chat(chat, cfg),
                    filter_correct=cfg.filter_correct, layers_per_batch=cfg.layers_per_batch, device=device)
dropped = table.attrs["dropped"]
table = jobs.with_model_columns(table, sm.wildcards.model, spec, sm.params.tiny, dropped=dropped)
atomic_write(sm.output.binding, lambda tmp, t=table: t.to_parquet(tmp, index=False))
log.info("wrote %s: %d pairs, %d dropped", sm.output.binding, table["pair"].nunique(), dropped)

table = probe_table(model, tok, QwenProbeConfig.from_dict(sm.params.probes), chat, device)
table = jobs.with_model_columns(table, sm.wildcards.model, spec, sm.params.tiny)
atomic_write(sm.output.probes, lambda tmp, t=table: t.to_parquet(tmp, index=False))
log.info("wrote %s", sm.output.probes)

"""Snakemake adapter: interchange interventions on the boxes task for one pretrained Qwen model (Table 1)."""
from vlbind.device import job_device
from vlbind.files import atomic_write
from vlbind.logs import setup_logging
from vlbind.qwen import jobs, models
from vlbind.qwen.binding import BindingConfig, interchange, make_pairs, their_chat
from vlbind.qwen.prompts import Chat

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
device, _ = job_device(sm.params.device, sm.threads)  # the weights' dtype: jobs.for_job logs it
spec = models.QwenModel.from_dict(sm.params.model)
model, tok = jobs.for_job(spec, sm.params.tiny, sm.params.dtype, device)
cfg = BindingConfig.from_dict(sm.params.binding)
chat = their_chat(Chat.from_dict(sm.params.chat), cfg)
table = interchange(model, tok, make_pairs(cfg.n_entries, cfg.pairs, cfg.seed), chat,
                    filter_correct=cfg.filter_correct, layers_per_batch=cfg.layers_per_batch, device=device)
dropped = table.attrs["dropped"]
table = jobs.with_model_columns(table, sm.wildcards.model, spec, sm.params.tiny, dropped=dropped)
atomic_write(sm.output.table, lambda tmp: table.to_parquet(tmp, index=False))
log.info("wrote %s: %d pairs, %d dropped", sm.output.table, table["pair"].nunique(), dropped)

"""Snakemake adapter: Direct and Indirect Retrieval of one pretrained Qwen model (or its tiny stand-in), loaded
once; each task's generation seeded on its own (retrieval.evaluate), as if it ran alone."""
from vlbind.core.device import job_device
from vlbind.core.files import atomic_write
from vlbind.core.logs import setup_logging
from vlbind.core.settings import from_dict
from vlbind.params import job_section
from vlbind.qwen import jobs, models
from vlbind.qwen.prompts import Chat, PromptConfig, prompts
from vlbind.qwen.retrieval import Generation, evaluate

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
device, _ = job_device(sm.params.device, sm.threads)  # the weights' dtype: jobs.for_job logs it
spec = models.QwenModel.from_dict(sm.params.model)
model, tok = jobs.for_job(spec, sm.params.tiny, sm.params.dtype, device)
cfg = PromptConfig.from_dict(sm.params.prompts)
chat = Chat.from_dict(sm.params.chat)
generation = from_dict(Generation, job_section(sm.params.generation, sm.config, "qwen.generation"))
for task, path in sm.output.items():
    table = evaluate(model, tok, prompts(cfg, task), chat=chat, generation=generation, device=device)
    table = jobs.with_model_columns(table, sm.wildcards.model, spec, sm.params.tiny)
    atomic_write(path, lambda tmp, t=table: t.to_parquet(tmp, index=False))
    log.info("wrote %s: accuracy %.3f over %d prompts", path, table["correct"].mean(), len(table))

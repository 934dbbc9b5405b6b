"""Snakemake adapter: Direct or Indirect Retrieval of one pretrained Qwen model (or its tiny stand-in)."""
import torch

from vlbind import config as vlconfig
from vlbind.cli import setup_logging
from vlbind.files import atomic_write
from vlbind.qwen import models
from vlbind.qwen.prompts import PromptConfig, prompts
from vlbind.qwen.retrieval import evaluate

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
torch.set_num_threads(sm.threads)
device = vlconfig.resolve_device(sm.params.device)
spec = models.QwenModel.from_dict(sm.params.model)
model, tok = models.tiny(spec.model_type) if sm.params.tiny else models.load(spec, sm.params.dtype, device)
cfg, gen = PromptConfig.from_dict(sm.params.prompts), sm.params.generation
table = evaluate(model.to(device), tok, prompts(cfg, sm.wildcards.task), system_prompt=cfg.system_prompt,
                 max_new_tokens=gen["max_new_tokens"], greedy=gen["greedy"], thinking=gen["thinking"],
                 seed=gen["seed"], batch_size=gen["batch_size"], device=device)
for i, (key, value) in enumerate({"model": sm.wildcards.model, "generation": spec.generation, "kind": spec.kind,
                                  "tiny": sm.params.tiny}.items()):
    table.insert(i, key, value)
atomic_write(sm.output.table, lambda tmp: table.to_parquet(tmp, index=False))
log.info("wrote %s: accuracy %.3f over %d prompts", sm.output.table, table["correct"].mean(), len(table))

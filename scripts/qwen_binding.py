"""Snakemake adapter: interchange interventions on the boxes task for one pretrained Qwen model (Table 1)."""
import torch

from vlbind import config as vlconfig
from vlbind.cli import setup_logging
from vlbind.files import atomic_write
from vlbind.qwen import models
from vlbind.qwen.binding import interchange, make_pairs

sm = snakemake  # noqa: F821 (injected by Snakemake)
log = setup_logging(sm.log[0])
torch.set_num_threads(sm.threads)
device = vlconfig.resolve_device(sm.params.device)
spec = models.QwenModel.from_dict(sm.params.model)
model, tok = models.tiny(spec.model_type) if sm.params.tiny else models.load(spec, sm.params.dtype, device)
cfg = sm.params.binding
table = interchange(model.to(device), tok, make_pairs(cfg["n_entries"], cfg["pairs"], cfg["seed"]),
                    sm.params.system_prompt, device=device)
dropped = table.attrs["dropped"]
for i, (key, value) in enumerate({"model": sm.wildcards.model, "generation": spec.generation, "kind": spec.kind,
                                  "tiny": sm.params.tiny, "dropped": dropped}.items()):
    table.insert(i, key, value)
atomic_write(sm.output.table, lambda tmp: table.to_parquet(tmp, index=False))
log.info("wrote %s: %d pairs kept, %d dropped", sm.output.table, table["pair"].nunique(), dropped)

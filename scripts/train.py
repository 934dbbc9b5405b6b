"""Snakemake adapter: train one stage from its parent's checkpoint (or from scratch) into its model dir."""
from pathlib import Path

import torch

from vlbind.core.device import job_device
from vlbind.core.files import read_json
from vlbind.core.logs import setup_logging
from vlbind.core.settings import from_dict
from vlbind.data.bank import ImageBank
from vlbind.data.spec import StageSpec
from vlbind.model.checkpoint import load_model
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.attempts import as_long_as, train_stage
from vlbind.training.config import TrainConfig

sm = snakemake  # noqa: F821 (injected by Snakemake)
setup_logging(sm.log[0], history=Path(sm.output.model).with_name("train.log"))  # keeps killed attempts
params, seed = sm.params.stage, int(sm.wildcards.seed)
device, precision = job_device(sm.params.device, sm.threads, params["train"]["precision"])
torch.manual_seed(seed)
parent = str(Path(sm.input.parent[0]).parent) if sm.input.parent else None
if parent:
    model, _ = load_model(parent, device)
else:
    model = Transformer(from_dict(ModelConfig, params["model"]))
bank = None
if "features" in sm.input.keys():
    bank = ImageBank.open(Path(sm.input.objects).parent, sm.input.features)
if "projector" in params:  # the first image stage gives the text model its visual projector
    model.attach_projector(bank.dim, params["projector"]["mult"], params["projector"]["scale"])
start = params.get("start")
start = (StageSpec.from_dict(start["task"]), start["steps"]) if start else None
cfg = TrainConfig.from_section(params["train"], seed, device, precision)
if "as_long_as" in params:  # a noise control: its twin's kept weights' steps and lr, its last step kept
    cfg = as_long_as(cfg, read_json(sm.input.twin, f"{params['as_long_as']}'s meta.json"))
train_stage(model, StageSpec.from_dict(params["task"]), cfg, Path(sm.output.model).parent, stage=params["stage"],
             device=device, parent=parent, bank=bank, start=start)

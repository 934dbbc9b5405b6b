"""Side experiment (not in the DAG): train one text stage exactly as the DAG's rule would, from a given
parent checkpoint, with extra config overlays, into a scratch directory. Compares a setting against the
DAG's own run of that stage step for step (same seed, same stream, same validation set).

    python docs/results/mini/experiments/stage_variant.py STAGE PARENT_DIR OUT_DIR --seed S \
        [--config config/config.yaml config/mini.yaml OVERLAY.yaml ...] [--set stages.text_s4.task.longest_fraction=0.5]
        [--evaluate] [--resume RUNNING_STAGE/resume.safetensors]

e.g. `... text_s4 results/models/seed0/text_s3 /tmp/lf_s0 --seed 0 --set stages.text_s4.task.longest_fraction=0.5`.
"""
import argparse
import logging
import sys
from pathlib import Path

import torch
import yaml

from vlbind import config as vlconfig
from vlbind.checkpoint import load_model
from vlbind.evaluate import EvalConfig, evaluate, ood_average
from vlbind.tasks import StageSpec
from vlbind.train import resume_weights, train_stage

ap = argparse.ArgumentParser()
ap.add_argument("stage", choices=vlconfig.TEXT_STAGES)
ap.add_argument("parent")
ap.add_argument("out")
ap.add_argument("--seed", type=int, required=True)
ap.add_argument("--config", nargs="+", default=["config/config.yaml", "config/mini.yaml"])
ap.add_argument("--set", nargs="*", default=[], metavar="DOTTED.KEY=YAML", help="one more overlay per item")
ap.add_argument("--evaluate", action="store_true", help="then evaluate as the DAG does (config `evaluate`)")
ap.add_argument("--resume", metavar="FILE", help="start from a running stage's current weights (its "
                "resume.safetensors; PARENT_DIR then only names the architecture and the parent), "
                "with a fresh optimizer")
a = ap.parse_args()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(message)s")
torch.set_num_threads(1)

config = vlconfig.load(a.config)
for item in a.set:
    key, value = item.split("=", 1)
    overlay = yaml.safe_load(value)
    for part in reversed(key.split(".")):
        overlay = {part: overlay}
    config = vlconfig.validate(vlconfig.deep_merge(config, overlay))
params = vlconfig.stage_params(config, a.stage)
print("params:", params["task"], params["train"], flush=True)
torch.manual_seed(a.seed)
model, _ = load_model(a.parent)
if a.resume:
    model.load_state_dict(resume_weights(a.resume))
meta = train_stage(model, StageSpec.from_dict(params["task"]), vlconfig.train_config(params["train"], a.seed, "cpu"),
                   Path(a.out), stage=params["stage"], parent=a.parent)
print(f"RESULT {meta['stopped_because']} steps={meta['steps']} reached {meta['max_pairs_reached']} "
      f"best={meta['best_val_accuracy']:.3f}", flush=True)
if a.evaluate:
    model, _ = load_model(a.out)  # the stage's saved (best) weights, as the DAG evaluates them
    table = evaluate(model, EvalConfig(**config["evaluate"]), "cpu")
    ind = table[table.n_objects <= config["evaluate"]["train_max_objects"]]
    print(table.to_string(), flush=True)
    print(f"EVAL in-distribution mean {ind.accuracy.mean():.4f}, OOD average {ood_average(table):.4f}", flush=True)

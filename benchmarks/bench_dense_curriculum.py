"""Does the text curriculum learn, and how fast? Steps and wall time to each text stage's target (or its stop),
per arm and seed, all side by side, one process each. Prints a table; asserts nothing.

    python benchmarks/bench_dense_curriculum.py [--paper] [--arms all one] [--seeds 0] \
        [--stages text_s1 text_s2 text_s3] [--cap 20000] [--target 0.98] [--device cpu] [--compile] [--out DIR]

Trains the text curriculum of config/config.yaml + config/mini.yaml (`--paper`: config/config.yaml alone, the
paper's 12 x 128 model) once per arm and seed, each from the same initial weights and data stream for a seed.
An arm is `train.queries` (`all`: every object queried, mini's; `one`: the paper's) with optional overrides
after a colon, e.g. `one:lr=3e-4,warmup_steps=500`: train keys, or task keys (StageSpec fields, e.g.
`symmetric_fraction=0`) for every stage or, as `key@stage=value`, for one (`symmetric_fraction@text_s1=0`).
Every stage stops as the config says (a target, or the plateau rule: `train.patience` validations without a
gain), at `--cap` steps at the latest, or at `--target` when given; the next stage starts from its kept
weights, as in the DAG; a stage with `train.ramp` (config.yaml's text_s4) trains its length ramp as the DAG does
(train_ramped: a fresh optimizer each length), its steps counted over the whole ramp. `--compile`: `train.compile`.
`--cudnn-attention`: PyTorch's own attention kernel choice, cuDNN included (model.SDPA_BACKENDS leaves it out): to see
on a GPU the bug that choice avoids.
With `--out`, each run's validation log (every `train.eval_every` steps) and a CSV of
stage rows stay there, written as they happen, so a run stopped from outside keeps what it had, and each
stage's directory holds its weights and its optimizer's last state (optimizer.safetensors: bench_text_s4.py's
`carry` continues it); a rerun with the same `--out` keeps the stages a run finished (their weights) and resumes
the one it was in from its last saved state (every `train.checkpoint_every` steps). On a CPU each process has one
thread: give each its own core.
"""

from __future__ import annotations

import argparse
import csv
import logging
import multiprocessing as mp
import tempfile
from dataclasses import fields
from pathlib import Path

import torch
import yaml
from torch.nn.attention import SDPBackend

from vlbind import config as vlconfig
from vlbind import model as model_module
from vlbind.attempts import train_ramped
from vlbind.checkpoint import META_FILE, MODEL_FILE, load_tensors, optimizer_tensors, save_tensors
from vlbind.device import precision_for
from vlbind.files import read_json
from vlbind.model import ModelConfig, Transformer
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig, make_optimizer, train_stage

OPTIMIZER_FILE = "optimizer.safetensors"

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ["arm", "seed", "stage", "steps", "stopped", "best", "best_step", "chance", "skipped", "wall_s",
          "steps_per_s"]


def parse_arm(arm: str) -> dict:
    """'one:lr=3e-4,warmup_steps=500' -> {'queries': 'one', 'lr': 0.0003, 'warmup_steps': 500}."""
    queries, _, rest = arm.partition(":")
    overrides = {"queries": queries}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        value = yaml.safe_load(value)
        try:  # YAML reads 3e-4 (no dot) as a string
            value = float(value) if isinstance(value, str) else value
        except ValueError:
            pass
        overrides[key] = value
    return overrides


def run(arm: str, seed: int, paper: bool, stages: list[str], cap: int, target: float | None, device: str,
        out: Path, compile: bool = False, cudnn_attention: bool = False) -> list[dict]:
    torch.set_num_threads(1)
    if cudnn_attention:
        model_module.SDPA_BACKENDS.append(SDPBackend.CUDNN_ATTENTION)
    name = f"{arm.replace(':', '_').replace(',', '_')}-seed{seed}"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True,
                        handlers=[logging.FileHandler(out / f"{name}.log")])
    paths = [ROOT / "config/config.yaml"] + ([] if paper else [ROOT / "config/mini.yaml"])
    config = vlconfig.load(paths)
    overrides, task_keys = parse_arm(arm), {f.name for f in fields(StageSpec)}
    config["train"].update({k: v for k, v in overrides.items() if k.partition("@")[0] not in task_keys})
    config["train"]["compile"] = compile or config["train"]["compile"]
    torch.manual_seed(seed)
    model, rows = Transformer(ModelConfig(**config["model"])), []
    for stage in stages:
        params = vlconfig.stage_params(config, stage)
        for key, value in overrides.items():
            task_key, _, only = key.partition("@")
            if task_key in task_keys and only in ("", stage):
                params["task"][task_key] = value
        params["train"]["max_steps"] = min(cap, params["train"]["max_steps"])
        if target is not None:
            params["train"]["target_accuracy"] = target
        cfg = TrainConfig.from_section(params["train"], seed, device,
                                       precision_for(params["train"]["precision"], device))
        spec, where = StageSpec.from_dict(params["task"]), out / name / stage
        if (where / META_FILE).is_file():  # finished by an earlier call with this --out
            model.load_state_dict(load_tensors(where / MODEL_FILE)[0])
            meta = read_json(where / META_FILE, "stage meta.json")
        elif cfg.ramp:  # as the DAG trains it: a fresh optimizer each length
            meta = train_ramped(model, spec, cfg, where, stage=stage, device=device)
        else:
            opt = make_optimizer(model.to(device), cfg)  # what train_stage makes; kept to save its last state
            meta = train_stage(model, spec, cfg, where, stage=stage, device=device, optimizer=opt)
            tensors, groups = optimizer_tensors(opt)
            save_tensors(where / OPTIMIZER_FILE, tensors, {"param_groups": groups})
        lengths = meta.get("ramp") or []
        steps, wall = meta["steps"] + meta.get("ramp_steps", 0), meta["wall_seconds"] + sum(x["wall_seconds"]
                                                                                           for x in lengths)
        rows.append({"arm": arm, "seed": seed, "stage": stage, "steps": steps,
                     "stopped": meta["stopped_because"], "best": round(meta["best_val_accuracy"], 4),
                     "best_step": meta["best_step"], "chance": round(meta["val_chance"], 4),
                     "skipped": meta.get("skipped_steps", 0) + sum(x.get("skipped_steps", 0) for x in lengths),
                     "wall_s": round(wall, 1), "steps_per_s": round(steps / max(wall, 1e-9), 1)})
        with open(out / f"{name}.csv", "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerows(rows)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paper", action="store_true", help="config/config.yaml alone (default: + config/mini.yaml)")
    ap.add_argument("--arms", nargs="+", default=["all", "one"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0])
    ap.add_argument("--stages", nargs="+", default=["text_s1", "text_s2", "text_s3"])
    ap.add_argument("--cap", type=int, default=20000, help="most steps per stage")
    ap.add_argument("--target", type=float, default=None, help="every stage's target (default: the config's)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true", help="train.compile (on CUDA: CUDA graphs)")
    ap.add_argument("--cudnn-attention", action="store_true", help="let SDPA choose cuDNN attention (module doc)")
    ap.add_argument("--out", type=Path, default=None, help="keep logs, stage CSVs and weights here")
    a = ap.parse_args()
    runs = [(arm, seed) for arm in a.arms for seed in a.seeds]
    with tempfile.TemporaryDirectory() as tmp:
        out = a.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        with mp.get_context("spawn").Pool(len(runs)) as pool:
            jobs = [pool.apply_async(run, (arm, seed, a.paper, a.stages, a.cap, a.target, a.device, out, a.compile,
                                            a.cudnn_attention))
                    for arm, seed in runs]
            rows = [r for j in jobs for r in j.get()]
    print(f"{'paper' if a.paper else 'mini'} config, {a.device}, cap {a.cap} steps per stage, target "
          f"{a.target if a.target is not None else 'as configured'}\n")
    print("| arm | seed | stage | steps (stopped because) | best validation (step) | chance | skipped steps | wall "
          "| steps/s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['arm']} | {r['seed']} | {r['stage']} | {r['steps']:,} ({r['stopped']}) | {r['best']:.3f} "
              f"({r['best_step']:,}) | {r['chance']:.3f} | {r['skipped']} | {r['wall_s'] / 60:.1f} min | "
              f"{r['steps_per_s']:.1f} |")


if __name__ == "__main__":
    main()

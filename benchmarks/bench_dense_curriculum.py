"""Steps and wall time to each text stage's target, dense supervision vs one query per prompt, for one seed.

    python benchmarks/bench_dense_curriculum.py [--seed 0] [--stages text_s1 text_s2 text_s3] [--cap 20000]

Trains the mini text curriculum (config/config.yaml + config/mini.yaml) twice side by side, one process and
one thread each, from the same initial weights and data stream: once with `train.queries: all` (mini's
setting), once with `one` (the paper's). A stage that misses its target by `--cap` steps stops there and
the next one starts from its best weights, as in the DAG. Prints a table; asserts nothing. Each process has
a core of its own on this 2-core machine: run it when nothing else runs.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
from pathlib import Path

import torch

from vlbind import config as vlconfig
from vlbind.model import ModelConfig, Transformer
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig, train_stage

ROOT = Path(__file__).resolve().parents[1]


def run(queries: str, seed: int, stages: list[str], cap: int, out: Path) -> list[dict]:
    torch.set_num_threads(1)
    config = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    config["train"]["queries"] = queries
    torch.manual_seed(seed)
    model, rows = None, []
    for stage in stages:
        params = vlconfig.stage_params(config, stage)
        params["train"]["max_steps"] = min(cap, params["train"]["max_steps"])
        if model is None:
            model = Transformer(ModelConfig(**config["model"]))
        meta = train_stage(model, StageSpec.from_dict(params["task"]),
                           TrainConfig.from_section(params["train"], seed, "cpu"), out / queries / stage, stage=stage)
        rows.append({"queries": queries, "stage": stage, "steps": meta["steps"], "wall_s": meta["wall_seconds"],
                     "best": meta["best_val_accuracy"], "stopped": meta["stopped_because"]})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stages", nargs="+", default=["text_s1", "text_s2", "text_s3"])
    ap.add_argument("--cap", type=int, default=20000, help="most steps per stage")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, mp.get_context("spawn").Pool(2) as pool:
        jobs = [pool.apply_async(run, (q, a.seed, a.stages, a.cap, Path(tmp))) for q in ("all", "one")]
        dense, single = (j.get() for j in jobs)
    print(f"seed {a.seed}, mini model, cap {a.cap} steps per stage\n")
    print("| stage | dense steps | dense wall | dense best | single steps | single wall | single best |")
    print("|---|---|---|---|---|---|---|")
    for d, s in zip(dense, single):
        print(f"| {d['stage']} | {d['steps']:,} ({d['stopped']}) | {d['wall_s'] / 60:.1f} min | {d['best']:.3f} "
              f"| {s['steps']:,} ({s['stopped']}) | {s['wall_s'] / 60:.1f} min | {s['best']:.3f} |")


if __name__ == "__main__":
    main()

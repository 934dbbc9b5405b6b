"""Which text-only lever lets text_s4 (shuffled association lists) leave chance? A sweep: text_s4 trained from given
text_s3 weights under a list of arms, seeds side by side, one process each. Writes a CSV as it goes; asserts nothing.

    python benchmarks/bench_text_s4.py --parents 'DIR/all-seed{seed}/text_s3' --arms base solo=0.5 \
        'solo=0.5+ramp+carry' --seeds 0 1 2 --steps 20000 [--paper] [--device cuda --compile] --out DIR

The parents are text_s3 model directories, one per seed (`{seed}` is filled in): the DAG's
results/runs/seed{S}/text_s3, or bench_dense_curriculum.py --out's (which also keep the optimizer's state). The
task is text_s4 of config/config.yaml + config/mini.yaml (`--paper`: config.yaml alone), symmetric prompts as
configured. An arm is levers joined by '+' (`base`: none); none hands the model the color-shape binding:
- `solo=F`: a share F of the retrieval prompts are solo-context practice prompts (the queried object alone in the
  context, the list whole; StageSpec.solo_fraction); `lookup=F`: one-hop lookups (query an association key,
  answer its item; StageSpec.lookup_fraction). Validation leaves practice prompts out.
- `ramp`: a length ramp, 2 objects, then 2..3, ..., 2..8, each to --target on its own validation before the next
  (the DAG's is attempts.train_ramped, `train.ramp`: the same lengths, but a length that ends short of its target on
  the plateau rule moves on to the next, where this tool ends the run);
- `carry`: the optimizer's state carried from the parent (its optimizer.safetensors) and through the ramp, with
  no second warm-up (without it every stage starts a fresh AdamW and warms up, as in the DAG);
- `one`: one query per training prompt (the paper's) instead of every object queried (config.yaml's);
- `KEY=VALUE`: any other train setting, e.g. `lr=3e-4`, `batch_size=256`, `warmup_steps=0`.
Every stage stops at --target, at the run's step budget (--steps over the whole ramp), or on the plateau rule,
which waits until validation leaves chance by 0.1 (train.plateau_above_chance): no stage ends in its chance phase.
--minutes ends every run after that much wall time (status `out_of_time`), its row as it stood.

Per run (a row of OUT/sweep.csv, rewritten at each validation): the step at which validation on 512 2-object
shuffled prompts first reaches chance + 0.1 (2 objects: 0.6) at two validations in a row (`left_chance`; with
one validation of 256, two CPU runs that stayed at chance for 140k steps "left" it by a blip), the total step at
which each ramp length passed (`pass_2`..`pass_8`), the final model's accuracy on 2..8 objects (`acc_2_8`, 512
prompts) and on 2 objects, and its steps/s (overall, and between the last two validations: `steady_steps_per_s`).
`--device cuda` runs every process on the GPU (several per GPU); `--compile` trains with train.compile (a run
whose compiled step fails is rerun eager and flagged); an arm with `eager` ignores --compile, to time both in one
call. On a CPU each process has one thread: give each its own core.
"""

from __future__ import annotations

import argparse
import csv
import logging
import multiprocessing as mp
import time
import traceback
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import yaml

from vlbind import config as vlconfig
from vlbind.checkpoint import load_model, load_optimizer_tensors, load_tensors
from vlbind.device import precision_for
from vlbind.inference import accuracy
from vlbind.tasks import StageSpec, batch_sizes, generate
from vlbind.train import TrainConfig, make_optimizer, train_stage

ROOT = Path(__file__).resolve().parents[1]
OPTIMIZER_FILE = "optimizer.safetensors"  # bench_dense_curriculum.py writes it beside each stage's weights
LENGTHS = range(2, 9)
FIELDS = (["arm", "seed", "device", "compiled", "status", "steps", "left_chance"] + [f"pass_{n}" for n in LENGTHS]
          + ["acc_2", "acc_2_8", "steps_per_s", "steady_steps_per_s", "wall_s", "error"])
LEFT_CHANCE = 0.1  # validation this far above chance has left it (the plateau rule waits as long)


def parse_arm(arm: str) -> tuple[dict, dict, set]:
    """'solo=0.5+ramp+lr=3e-4' -> (task keys, train keys, flags)."""
    task, train, flags = {}, {}, set()
    for lever in filter(None, arm.split("+")):
        key, eq, value = lever.partition("=")
        if not eq:
            if key not in ("base", "ramp", "carry", "one", "eager"):
                raise ValueError(f"arm {arm!r}: unknown lever {key!r}; valid: base, ramp, carry, one, eager, "
                                 "solo=F, lookup=F, or a train KEY=VALUE")
            flags.add(key)
            continue
        value = yaml.safe_load(value)
        value = float(value) if isinstance(value, str) else value  # YAML reads 3e-4 (no dot) as a string
        if key in ("solo", "lookup"):
            task[f"{key}_fraction"] = value
        else:
            train[key] = value
    if "one" in flags:
        train["queries"] = "one"
    if "carry" in flags:
        train["warmup_steps"] = 0
    return task, train, flags


def _validation(spec: StageSpec, seed: int, size: int, n: int | None) -> list:
    rng = np.random.default_rng([seed, 0x5EED4, n or 0])
    return [generate(spec.without_practice(), s, rng, n_objects=n) for s in batch_sizes(size, 256)]


class OutOfTime(Exception):
    pass


class Row:
    """One run's CSV row, rewritten (atomically) whenever it changes."""

    def __init__(self, path: Path, **fields):
        self.path, self.fields = path, {k: "" for k in FIELDS} | fields

    def update(self, **fields) -> None:
        self.fields.update(fields)
        tmp = self.path.with_suffix(".tmp")
        with open(tmp, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS)
            w.writeheader()
            w.writerow(self.fields)
        tmp.replace(self.path)


def run(arm: str, seed: int, parents: str, paper: bool, steps: int, target: float, device: str, compile_: bool,
        out: Path, deadline: float = float("inf")) -> dict:
    torch.set_num_threads(1)
    name = f"{arm.replace('+', '_').replace('=', '')}-seed{seed}"
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", force=True,
                        handlers=[logging.FileHandler(out / f"{name}.log")])
    task_keys, train_keys, flags = parse_arm(arm)
    compile_ = compile_ and "eager" not in flags
    row = Row(out / f"{name}.csv", arm=arm, seed=seed, device=device, compiled=compile_, status="running")
    try:
        return _train(arm, seed, parents, paper, steps, target, device, compile_, out / name, row,
                      task_keys, train_keys, flags, deadline)
    except Exception:
        if not compile_:
            row.update(status="failed", error=traceback.format_exc(limit=2).splitlines()[-1][:200])
            raise
        logging.exception("%s: the compiled run failed; rerunning it eager", name)
        row.update(compiled=False, error="compile failed: rerun eager")
        return _train(arm, seed, parents, paper, steps, target, device, False, out / f"{name}-eager", row,
                      task_keys, train_keys, flags, deadline)


def _train(arm, seed, parents, paper, steps, target, device, compile_, out, row, task_keys, train_keys, flags,
           deadline):
    paths = [ROOT / "config/config.yaml"] + ([] if paper else [ROOT / "config/mini.yaml"])
    params = vlconfig.stage_params(vlconfig.load(paths), "text_s4")
    spec = StageSpec.from_dict({**params["task"], "shuffle": True, **task_keys})
    train = {**params["train"], **train_keys, "compile": compile_, "max_steps": steps,
             "target_accuracy": target, "plateau_above_chance": LEFT_CHANCE}
    cfg = TrainConfig.from_section(train, seed, device, precision_for(train["precision"], device))
    parent = Path(parents.format(seed=seed))
    model, _ = load_model(parent, device)
    opt = None
    if "carry" in flags:
        opt = make_optimizer(model, cfg)
        tensors, meta = load_tensors(parent / OPTIMIZER_FILE)
        load_optimizer_tensors(opt, tensors, meta["param_groups"])
    two = _validation(spec, seed, 512, 2)
    chance2 = 0.5
    done, t0, left, last, above = 0, time.time(), None, [time.time(), 0], None

    def watch(step: int) -> None:  # after every optimizer step of a stage: validate on 2 objects
        nonlocal left, above
        if time.time() > deadline:
            row.update(steps=done + step)
            raise OutOfTime
        if step % cfg.eval_every:
            return
        now = time.time()  # steps/s between two validations, once the first compilation is behind
        if step > last[1]:
            row.update(steady_steps_per_s=round((step - last[1]) / (now - last[0]), 1))
        last[:] = [time.time(), step]
        if left is None:
            acc2 = accuracy(model, two, device, cfg.precision)
            model.train()
            if acc2 < chance2 + LEFT_CHANCE:
                above = None
            elif above is None:
                above = done + step
            else:  # the second validation in a row above chance + LEFT_CHANCE: it left chance at the first
                left = above
                row.update(left_chance=left)

    status = "done"
    for n in (LENGTHS if "ramp" in flags else [LENGTHS[-1]]):
        stage_cfg = replace(cfg, max_steps=steps - done)
        if stage_cfg.max_steps <= 0:
            break
        try:
            meta = train_stage(model, replace(spec, max_objects=n), stage_cfg, out / f"n{n}",
                               stage=f"text_s4_n{n}", device=device, parent=str(parent), callback=watch,
                               optimizer=opt)
        except OutOfTime:  # the model as it stands (not its best weights) is scored below
            status = "out_of_time"
            break
        done += meta["steps"]
        row.update(steps=done, steps_per_s=round(done / (time.time() - t0), 1))
        if meta["stopped_because"] != "target_accuracy":
            break
        row.update(**{f"pass_{n}": done})
        last[:] = [time.time(), 0]
    model.eval()
    steps_done = int(row.fields["steps"] or 0)
    row.update(status=status, steps_per_s=round(steps_done / (time.time() - t0), 1),
               acc_2=round(accuracy(model, two, device, cfg.precision), 4),
               acc_2_8=round(accuracy(model, _validation(spec, seed, 512, None), device, cfg.precision), 4),
               wall_s=round(time.time() - t0, 1))
    return row.fields


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parents", required=True, help="text_s3 model directory per seed, with {seed}")
    ap.add_argument("--arms", nargs="+", default=["base"])
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=20000, help="step budget per run (the whole ramp)")
    ap.add_argument("--target", type=float, default=0.95, help="validation accuracy that passes a stage")
    ap.add_argument("--paper", action="store_true", help="config/config.yaml alone (default: + config/mini.yaml)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--compile", action="store_true", help="train.compile (arms with `eager` excepted)")
    ap.add_argument("--minutes", type=float, default=float("inf"), help="wall-time budget per run")
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    for arm in a.arms:
        parse_arm(arm)  # a bad arm fails before anything starts
    a.out.mkdir(parents=True, exist_ok=True)
    runs = [(arm, seed) for arm in a.arms for seed in a.seeds]
    deadline = time.time() + 60 * a.minutes
    with mp.get_context("spawn").Pool(len(runs)) as pool:
        jobs = [pool.apply_async(run, (arm, seed, a.parents, a.paper, a.steps, a.target, a.device, a.compile, a.out,
                                                deadline))
                for arm, seed in runs]
        for j in jobs:
            try:
                j.get()
            except Exception as e:  # its row says so; the others go on
                print(f"a run failed: {e}")
    rows = [next(csv.DictReader(open(p))) for p in sorted(a.out.glob("*-seed*.csv"))]
    with open(a.out / "sweep.csv", "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        w.writerows(rows)
    print(f"text_s4 sweep, {a.device}{' compiled' if a.compile else ''}, {a.steps} steps per run, target {a.target}")
    print("| arm | seed | steps | left chance (2 obj.) | passed 2 / 4 / 8 | acc 2 | acc 2..8 | steps/s |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['arm']}{'' if r['compiled'] == 'True' else ' (eager)'} | {r['seed']} | {r['steps']} | "
              f"{r['left_chance'] or '-'} | {r['pass_2'] or '-'} / {r['pass_4'] or '-'} / {r['pass_8'] or '-'} | "
              f"{r['acc_2']} | {r['acc_2_8']} | {r['steps_per_s']} |")


if __name__ == "__main__":
    main()

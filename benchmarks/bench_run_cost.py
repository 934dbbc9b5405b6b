"""What a finished run of the DAG costs on this machine's idle cores, and where it spends it. Prints tables; asserts
nothing.

    python benchmarks/bench_run_cost.py --config config/config.yaml config/mini.yaml \
        --training docs/results/mini/training.csv --jobs docs/results/mini/job_wall_times.csv \
        --times step_times.csv [--cores 2] [--steps 30] [--missing cap]

1. Idle seconds per training step of every training job's phases: the stage, each length of a ramped stage
   (`train.ramp`) and the easy start of a stage that has one (`start`), at the config's shapes (batch, lengths,
   images, noise, dense queries) in one thread at the config's precision for this CPU, plus the stage's validation
   (its `val_size` prompts every `eval_every` steps) as a share of a step. Image stages read a bank of the render
   config's objects with random features of the encoder's shape (tokens x dim of an untrained timm model of its
   `timm_name`, pooled to its `grid`): a step never looks inside them. Kept in --times: a stage found there is not
   measured again (measure once, schedule several runs of the same shapes; a run with a stage more measures that one).
   A training job's fixed cost: a fresh interpreter importing what scripts/train.py imports, and the stage's
   validation set drawn once (measured with each stage).
2. The DAG's jobs (`snakemake -n --forceall TARGET` with these configs in an empty directory) and their dependencies
   (a job needs the job that writes one of its inputs). A training job's time: its steps in --training (a run's
   training.csv: every attempt, every ramp length; the easy start first) x each phase's idle time per step, plus the
   fixed cost. Every other job's time is the run's own (--jobs, a run's job_wall_times.csv): measured with other
   jobs beside it, so above its idle time; a job that run lacked (a variant it did not have) takes the median of its
   rule's jobs in this DAG that it had, and the output names it. A training job that --training lacks (a run in
   progress) is left out, or with `--missing cap` trains to its cap (`max_steps`, every ramp length's steps in the
   last one): the run's most.
   With `--certain-plateau`, a stage that waited out a plateau it could not leave (a best no validation could beat by
   min_delta, one attempt) counts to its best step: the loop stops there since 8c5c58b, with the same weights.
3. A list schedule on --cores one-thread slots (every model job takes one thread at mini: resources.threads),
   ready jobs taken in Snakemake's priority order (the rules' `priority:`), ties by the longest path to the end;
   beside it the two bounds no schedule beats: the critical path and the work over the cores.

Run it when nothing else runs: on a busy 2-core box timings are noise.
"""

from __future__ import annotations

import argparse
import heapq
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from graphlib import TopologicalSorter
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from vlbind import config as vlconfig
from vlbind import params as vlparams
from vlbind.core.device import job_device
from vlbind.core.settings import from_dict
from vlbind.data.bank import ImageBank
from vlbind.data.render import RenderConfig, layout_objects
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import generate, pack_queries
from vlbind.model.inference import correct
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.config import TrainConfig
from vlbind.training.loop import Validation, _step, gain_impossible, validation_set
from vlbind.training.optim import make_optimizer

ROOT = Path(__file__).resolve().parents[1]
TRAIN_RULES = ("train_text", "train_vision")
JOB = re.compile(r"^(?:local)?rule (\w+):\n((?:    .*\n)+)", re.M)


# --- the DAG ------------------------------------------------------------------------------------------------------

def dag_jobs(configs: list[str], target: str) -> pd.DataFrame:
    """Every job of the DAG that builds `target` from nothing: rule, name (its benchmark file under results/benchmarks/,
    as job_wall_times.csv names it), wildcards, priority, inputs, outputs."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        out = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-n", "--forceall",
                              "-d", tmp, "--configfile", *[str(Path(c).resolve()) for c in configs], "--", target],
                             capture_output=True, text=True, env=env, check=True).stdout
    rows = []
    for rule, body in JOB.findall(out):
        fields = dict(line.strip().split(": ", 1) for line in body.splitlines() if ": " in line)
        bench = fields.get("benchmark", "")
        rows.append({"rule": rule, "job": bench.removeprefix("results/benchmarks/").removesuffix(".tsv") or rule,
                     "wildcards": dict(w.split("=", 1) for w in fields.get("wildcards", "").split(", ") if w),
                     "priority": int(fields.get("priority", 0)),
                     "inputs": fields.get("input", "").split(", ") if "input" in fields else [],
                     "outputs": fields.get("output", "").split(", ") if "output" in fields else []})
    return pd.DataFrame(rows)


def phases(config: dict, stage: str, encoder: str | None) -> list[tuple[str, StageSpec]]:
    """A training job's phases in the order it trains them: ("start", easy start), ("n{k}", each ramp length), ("",
    the stage)."""
    params = vlparams.stage_params(config, stage, encoder)
    spec = StageSpec.from_dict(params["task"])
    out = [("start", StageSpec.from_dict(params["start"]["task"]))] if params.get("start") else []
    if params["train"].get("ramp") and spec.min_objects < spec.max_objects:
        out += [(f"n{k}", replace(spec, max_objects=k)) for k in range(spec.min_objects, spec.max_objects)]
    return out + [("", spec)]


# --- 1. idle seconds per step -------------------------------------------------------------------------------------

def encoder_bank(config: dict, encoder: str) -> ImageBank:
    """The render config's bank with random features of `encoder`'s (tokens, dim)."""
    import timm

    from vlbind.vision.encoders import patch_tokens

    spec = vlparams.encoder_spec(config, encoder)
    size = config["render"]["size"]
    with torch.no_grad():
        tokens = patch_tokens(timm.create_model(spec["timm_name"], pretrained=False).eval(),
                              torch.zeros(1, 3, size, size), spec.get("grid"))
    objects = layout_objects(from_dict(RenderConfig, config["render"]))
    n = int(objects["image"].max()) + 1
    feats = np.random.default_rng(0).standard_normal((n, *tokens.shape[1:])).astype(np.float16)
    return ImageBank(config["render"]["layout"], objects, feats, {})


def measure(config: dict, stage: str, encoder: str | None, steps: int) -> list[dict]:
    """Idle seconds per step of each phase of `stage` (validation's share included) and the stage's fixed cost."""
    params = vlparams.stage_params(config, stage, encoder)
    device, precision = job_device(config["device"], 1, params["train"]["precision"])
    cfg = TrainConfig.from_section(params["train"], 0, device, precision)
    torch.manual_seed(0)
    model = Transformer(from_dict(ModelConfig, config["model"]))
    bank = val_bank = None
    if vlparams.uses_images(config, stage):
        bank, val_bank = encoder_bank(config, encoder).split(cfg.val_images)
        model.attach_projector(bank.dim, config["projector"]["mult"], config["projector"]["scale"])
    opt, rng, rows = make_optimizer(model, cfg), np.random.default_rng(0), []
    for phase, spec in phases(config, stage, encoder):
        t0 = time.perf_counter()
        val = Validation.of(validation_set(spec, cfg, bank=val_bank), spec.for_validation().judged)
        t_set = time.perf_counter() - t0
        times = []
        for i in range(steps + 3):  # the loop's work per step: draw, pack, step; 3 warm-up steps
            t0 = time.perf_counter()
            batch = generate(spec, cfg.batch_size, rng, bank=bank)
            batch = pack_queries(batch) if cfg.queries == "all" else batch
            _step(model, model, opt, batch, cfg, cfg.warmup_steps + i + 1, device, bank)
            times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        val.read(correct(model, val.batches, device, cfg.precision, val_bank))
        t_val = time.perf_counter() - t0
        step = float(np.median(times[3:]))
        rows.append({"stage": stage, "encoder": encoder or "", "phase": phase, "step_s": step, "validation_s": t_val,
                     "eval_every": cfg.eval_every, "s_per_step": step + t_val / cfg.eval_every,
                     "validation_set_s": t_set, "precision": precision})
        print(f"  {stage}{':' + phase if phase else ''}{' (' + encoder + ')' if encoder else ''}: "
              f"{step * 1e3:.0f} ms/step, validation {t_val:.1f} s every {cfg.eval_every}", flush=True)
    return rows


def job_start_seconds() -> float:
    """A fresh interpreter importing what a training job imports (scripts/train.py), the median of 3."""
    code = ("import torch, vlbind.training.attempts, vlbind.model.checkpoint, vlbind.data.bank, "
            "vlbind.core.logs, snakemake")
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# --- 2. job times -------------------------------------------------------------------------------------------------

def ramp_steps(ramp: str) -> dict[str, int]:
    """training.csv's `ramp` ("2:4000:0.979 3:2750:0.957 ...") as {"n2": 4000, ...}."""
    return {f"n{k}": int(s) for k, s, _ in (x.split(":") for x in str(ramp).split())} if isinstance(ramp, str) else {}


def certain_plateau(row: pd.Series, train: dict) -> bool:
    """Whether a finished stage (its training.csv row; `train`, its params' train section) waited out its patience
    after a best no validation could beat: one attempt that kept its best validation, ended by the plateau rule, best +
    min_delta > 1. Today's loop stops such a stage at its best step (training.loop.gain_impossible) with the same
    weights."""
    return (row["stopped_because"] == "plateau" and int(row["attempts"]) == 1 and train.get("keep") != "last"
            and gain_impossible(float(row["best_val_accuracy"]), float(train["min_delta"])))


def stage_row(config: dict, job: dict, training: pd.DataFrame) -> tuple[pd.Series | None, dict]:
    """A training job's row of training.csv (None: the run has none) and its stage's params."""
    seed, stage, encoder = int(job["wildcards"]["seed"]), job["wildcards"]["stage"], job["wildcards"].get("encoder")
    row = training[(training["run"] == vlparams.run_name(seed, stage, encoder)) & (training["stage"] == stage)]
    return (None if row.empty else row.iloc[0]), vlparams.stage_params(config, stage, encoder)


def training_seconds(config: dict, job: dict, training: pd.DataFrame, times: pd.DataFrame, start_s: float,
                     missing: str, certain: bool = False) -> float | None:
    """A training job's idle seconds: its phases' steps x their idle time per step + the fixed cost; with `certain`,
    a stage that waited out a certain plateau (certain_plateau) counted to its best step."""
    stage, encoder = job["wildcards"]["stage"], job["wildcards"].get("encoder")
    row, params = stage_row(config, job, training)
    if row is not None:
        last = int(row["best_step"]) if certain and certain_plateau(row, params["train"]) else int(row["steps"])
        steps, ramp = {"": last}, ramp_steps(row["ramp"])
    elif missing == "cap":
        steps, ramp = {"": int(params["train"]["max_steps"])}, {}
    else:
        return None
    if params.get("start"):  # the easy start's steps come first, out of the stage's
        steps["start"] = min(int(params["start"]["steps"]), steps[""])
        steps[""] -= steps["start"]
    steps |= ramp
    mine = times[(times["stage"] == stage) & (times["encoder"] == (encoder or ""))].set_index("phase")
    return start_s + mine["validation_set_s"].sum() + sum(n * mine.loc[p, "s_per_step"] for p, n in steps.items())


def other_seconds(job: dict, others: pd.DataFrame) -> tuple[float, str]:
    """A job's seconds in the run's job_wall_times.csv and where they come from: its own, or the sum of those a job
    was made as several of in that run (one per output, e.g. the analyses before they became one job per model);
    (0, "") for a job that run did not have (fill_by_rule fills it)."""
    seconds = others.set_index("job")["seconds"]
    if job["job"] in seconds.index:
        return float(seconds[job["job"]]), "own"
    names = [Path(o).with_suffix("").as_posix().removeprefix("results/") for o in job["outputs"]]
    if seconds.index.isin(names).any():
        return float(seconds.reindex(names).fillna(0.0).sum()), "own"
    return 0.0, ""


def fill_by_rule(jobs: pd.DataFrame) -> pd.DataFrame:
    """A job the timed run did not have (a variant it lacked) takes the median of its rule's jobs in this DAG that it
    had, each as other_seconds counts it (an analysis job: the sum of the per-analysis jobs it was made as), timed_as
    "rule"; a job with no such sibling stays at 0, timed_as ""."""
    jobs = jobs.copy()
    own = jobs[jobs["timed_as"] == "own"].groupby("rule")["seconds"].median()
    lacked = (jobs["timed_as"] == "") & jobs["rule"].isin(own.index)
    jobs.loc[lacked, "seconds"] = jobs.loc[lacked, "rule"].map(own)
    jobs.loc[lacked, "timed_as"] = "rule"
    return jobs


# --- 3. the schedule ----------------------------------------------------------------------------------------------

def schedule(jobs: pd.DataFrame, cores: int) -> tuple[float, float, list[str]]:
    """(makespan of a list schedule on `cores` slots, critical path seconds, the critical path's job names)."""
    writer = {o: i for i, outs in enumerate(jobs["outputs"]) for o in outs}
    needs = [{writer[x] for x in ins if x in writer} for ins in jobs["inputs"]]
    users = [[] for _ in needs]
    for i, deps in enumerate(needs):
        for d in deps:
            users[d].append(i)
    secs = jobs["seconds"].to_numpy()
    tail = np.zeros(len(jobs))  # longest path from a job's start to the end
    for i in reversed(list(TopologicalSorter(dict(enumerate(needs))).static_order())):
        tail[i] = secs[i] + max((tail[u] for u in users[i]), default=0.0)
    path, i = [], int(np.argmax(tail))
    while True:
        path.append(jobs["job"].iloc[i])
        if not users[i]:
            break
        i = max(users[i], key=lambda u: tail[u])
    left = [len(d) for d in needs]
    ready = [(-jobs["priority"].iloc[i], -tail[i], i) for i in range(len(jobs)) if not left[i]]
    heapq.heapify(ready)
    running, clock, free = [], 0.0, cores
    while ready or running:
        while ready and free:
            _, _, i = heapq.heappop(ready)
            heapq.heappush(running, (clock + secs[i], i))
            free -= 1
        clock, i = heapq.heappop(running)
        free += 1
        for u in users[i]:
            left[u] -= 1
            if not left[u]:
                heapq.heappush(ready, (-jobs["priority"].iloc[u], -tail[u], u))
    return clock, float(tail.max()), path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", nargs="+", default=["config/config.yaml", "config/mini.yaml"])
    ap.add_argument("--target", default="all")
    ap.add_argument("--training", required=True, help="a run's training.csv (steps per stage)")
    ap.add_argument("--jobs", required=True, help="a run's job_wall_times.csv (the other jobs' seconds)")
    ap.add_argument("--times", required=True, help="idle step times: read if it exists, else measured into it")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--steps", type=int, default=30, help="timed steps per phase")
    ap.add_argument("--missing", choices=("skip", "cap"), default="skip")
    ap.add_argument("--certain-plateau", action="store_true",
                    help="count a stage that waited out a certain plateau to its best step, as the loop stops it "
                         "since 8c5c58b (a run trained before it waited)")
    args = ap.parse_args()
    config = vlconfig.load(args.config)
    jobs = dag_jobs(args.config, args.target)
    train = jobs[jobs["rule"].isin(TRAIN_RULES)]
    times = pd.read_csv(args.times, keep_default_na=False) if Path(args.times).is_file() else pd.DataFrame()
    known = set(zip(times["stage"], times["encoder"])) if len(times) else set()
    units = sorted({(w["stage"], w.get("encoder") or "") for w in train["wildcards"]} - known)
    if units:
        print(f"measuring idle step times of {len(units)} stages into {args.times}:", flush=True)
        new = pd.DataFrame([r for s, e in units for r in measure(config, s, e or None, args.steps)])
        new["job_start_s"] = times["job_start_s"].iloc[0] if len(times) else job_start_seconds()
        times = pd.concat([times, new], ignore_index=True)
        times.to_csv(args.times, index=False)
    start_s = float(times["job_start_s"].iloc[0])
    training = pd.read_csv(args.training)
    others = pd.read_csv(args.jobs)
    timed = [(training_seconds(config, j, training, times, start_s, args.missing, args.certain_plateau), "own")
             if j["rule"] in TRAIN_RULES
             else other_seconds(j, others) for _, j in jobs.iterrows()]
    jobs["seconds"], jobs["timed_as"] = [t for t, _ in timed], [a for _, a in timed]
    jobs = fill_by_rule(jobs)
    unknown = jobs[jobs["timed_as"] == ""]["job"].tolist()
    by_rule = jobs[jobs["timed_as"] == "rule"]["job"].tolist()
    gone = jobs[jobs["seconds"].isna()]
    jobs = jobs.dropna(subset=["seconds"]).reset_index(drop=True)
    makespan, critical, path = schedule(jobs, args.cores)
    jobs["kind"] = [w["stage"] if r in TRAIN_RULES else r for w, r in zip(jobs["wildcards"], jobs["rule"])]
    by = jobs.groupby("kind")["seconds"].agg(["count", "sum"]).sort_values("sum", ascending=False)
    print(f"\n{args.training}: {len(jobs)} jobs" + (f" ({len(gone)} training jobs without steps left out: "
          f"{', '.join(gone['job'])})" if len(gone) else ""))
    print("\n| stage or rule | jobs | minutes (one core) |\n|---|---|---|")
    for kind, r in by.iterrows():
        print(f"| {kind} | {int(r['count'])} | {r['sum'] / 60:.1f} |")
    work = jobs["seconds"].sum()
    print(f"\nwork {work / 60:.1f} min; on {args.cores} cores: list schedule {makespan / 60:.1f} min, bounds: critical "
          f"path {critical / 60:.1f} min, work / cores {work / args.cores / 60:.1f} min")
    print("critical path: " + " -> ".join(path))
    if args.certain_plateau:
        rows = [stage_row(config, j, training) for _, j in train.iterrows()]
        cut = [f"{r['run']}/{r['stage']} {r['steps']:,} -> {r['best_step']:,}" for r, params in rows
               if r is not None and certain_plateau(r, params["train"]) and r["steps"] > r["best_step"]]
        print(f"counted to their best step (a certain plateau): {', '.join(cut) or 'none'}")
    if by_rule:
        print(f"not in {args.jobs}, timed as the median of its rule's jobs in this DAG that it had: "
              f"{', '.join(by_rule)}")
    if unknown:
        print(f"no time in {args.jobs} (counted 0): {', '.join(unknown)}")


if __name__ == "__main__":
    main()

"""Result tables over many runs, for the table rules, the figures and the DAG's closing summary (no torch):
evaluation tables read and split by prompt order, runs that count, OOD means per variant (ood_accuracy.csv),
one row per trained stage (training.csv), one per scheduler run of a working directory and its stretches."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from vlbind.core.stages import VARIANT_STAGE
from vlbind.evaluation.outcomes import STALLED, ood_average
from vlbind.training.config import attempt_count

# the paper's four, then the curriculum control (stages.CURRICULUM: the image arm's curriculum in text), then the
# binding-loss control (stages.CONTROLS: text models given the image arm's binding loss), then the noise control
# (stages.NOISE_CONTROL: text_s5 trained on as long as noise_text, without noise)
VARIANT_ORDER = list(VARIANT_STAGE)


def read_eval_tables(paths: list[str | Path]) -> pd.DataFrame:
    """Concatenate evaluation tables; each must carry `variant` and `run` columns."""
    frames = [pd.read_parquet(p) for p in paths]
    if not frames:
        raise ValueError("no evaluation tables given")
    return pd.concat(frames, ignore_index=True)


def by_order(df: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(order, rows) per association-list order of evaluation tables, in the order evaluated (the first decides
    convergence); a table without an `order` column holds shuffled lists."""
    if "order" not in df:
        return [("shuffled", df)]
    return [(o, df[df["order"] == o]) for o in df["order"].unique()]


def is_diverged(df: pd.DataFrame) -> pd.Series:
    return df["diverged"] if "diverged" in df else pd.Series(False, index=df.index)


def is_unconverged(df: pd.DataFrame) -> pd.Series:
    return ~df["converged"] if "converged" in df else pd.Series(False, index=df.index)


def converged(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of runs neither diverged nor below the convergence bar (a table without the verdict columns
    counts as converged)."""
    return df[~is_diverged(df) & ~is_unconverged(df)]


def ood_table(df: pd.DataFrame) -> pd.DataFrame:
    """ood_summary for each prompt order, one row per order and variant (ood_accuracy.csv)."""
    return pd.concat([ood_summary(d).rename_axis("variant").reset_index().assign(order=o) for o, d in by_order(df)],
                     ignore_index=True).set_index(["order", "variant"])


def ood_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per variant, over the rows of one prompt order: runs used, runs left out as diverged and as not converged,
    mean and standard error of the per-run OOD averages of the runs used (NaN for a variant with none), and the runs
    whose training needed a retry (`retried_runs`, all runs)."""
    variants = df["variant"].unique()
    diverged = df[is_diverged(df)].groupby("variant")["run"].nunique().reindex(variants, fill_value=0)
    unconverged = df[~is_diverged(df) & is_unconverged(df)].groupby("variant")["run"].nunique().reindex(variants,
                                                                                                    fill_value=0)
    used = converged(df)
    per_run = (used.groupby(["variant", "run"]).apply(ood_average, include_groups=False).rename("ood").reset_index()
               if len(used) else pd.DataFrame({"variant": [], "run": [], "ood": []}))
    g = per_run.groupby("variant")["ood"]
    out = pd.DataFrame({"runs": g.size(), "ood_mean": g.mean(), "ood_se": g.std(ddof=1) / np.sqrt(g.size())})
    out = out.reindex(variants).fillna({"runs": 0}).astype({"runs": int})
    out["diverged_runs"], out["unconverged_runs"] = diverged.astype(int), unconverged.astype(int)
    reason = df["divergence"] if "divergence" in df else pd.Series("", index=df.index)
    stalled = df[is_diverged(df) & reason.str.contains(STALLED)].groupby("variant")["run"].nunique()
    out["stalled_runs"] = stalled.reindex(variants, fill_value=0).astype(int)  # of the diverged ones
    retried = df[df["retries"] > 0] if "retries" in df else df.iloc[:0]  # the retry rule (vlbind.training.attempts)
    out["retried_runs"] = retried.groupby("variant")["run"].nunique().reindex(variants, fill_value=0).astype(int)
    return out.reindex([v for v in VARIANT_ORDER if v in out.index] + [v for v in out.index if v not in VARIANT_ORDER])


def training_summary(meta_paths: list[str | Path]) -> pd.DataFrame:
    """One row per trained stage: run, stage, steps, best step and validation accuracy, the step whose weights the stage
    kept and their validation accuracy (train.keep), the validation set's chance (NaN for models trained before it was
    recorded), why the kept attempt stopped (`stopped_because`) and why the stage's last attempt did, where the stage
    ended (`ended_because`: the cap, say, after a kept attempt the stall rule ended), wall time (a ramp's lengths
    included; the time of the steps the stage kept: a stage killed and resumed runs again from its last saved state,
    train.checkpoint_every, and the first run of those steps is not counted); for a ramped stage (train.ramp) the steps
    of the lengths before its own (`ramp_steps`; `steps` and the step columns count its own length) and per length
    `ramp`: max_objects:steps:best validation accuracy; the retry rule's attempts of the stage's own length (`attempts`,
    the kept one the last that ran unless none passed; `steps` counts them all) and the retries of its ramp's lengths
    (`ramp_retries`: attempts beyond the first, summed; training.attempts). Where validation mixes kinds of prompt
    (train.Validation), the part its rules read (`val_judged`: the best and kept accuracies and val_chance are that
    part's) and each part's kept accuracy, chance and prompts (`val_{part}_accuracy`, `..._chance`, `..._prompts`; empty
    in other rows)."""
    from vlbind.core.files import read_json

    rows = []
    for p in meta_paths:
        meta = read_json(p, "model meta.json")
        ramp = meta.get("ramp", [])
        rows.append({"run": Path(p).parent.parent.name, "stage": meta["stage"], "steps": meta["steps"],
                     "best_step": meta["best_step"], "best_val_accuracy": meta["best_val_accuracy"],
                     "kept_step": meta.get("kept_step", meta["best_step"]),
                     "kept_val_accuracy": meta.get("kept_val_accuracy", meta["best_val_accuracy"]),
                     "val_chance": meta.get("val_chance", float("nan")),
                     "stopped_because": meta["stopped_because"],
                     "ended_because": (meta["attempts"][-1]["stopped_because"] if isinstance(meta.get("attempts"), list)
                                       else meta["stopped_because"]),
                     "wall_minutes": (meta["wall_seconds"] + sum(r["wall_seconds"] for r in ramp)) / 60,
                     "ramp_steps": meta.get("ramp_steps", 0),
                     "ramp": " ".join(f"{r['max_objects']}:{r['steps']}:{r['best_val_accuracy']:.3f}" for r in ramp),
                     "attempts": attempt_count(meta), "ramp_retries": sum(attempt_count(r) - 1 for r in ramp),
                     "val_judged": meta.get("val_judged", "")}
                    | {f"val_{part}_{k}": d[k if k != "accuracy" else "kept_accuracy"]
                       for part, d in meta.get("val_parts", {}).items() for k in ("accuracy", "chance", "prompts")})
    return pd.DataFrame(rows)


def unit_outcomes(meta_paths: list[str | Path]) -> pd.DataFrame:
    """One row per run and unit (training.attempts: each length of a stage's ramp, `{stage}_n{n}`, then the stage's own
    length, `stage`) from the stages' meta.json: its pass bar (the target_accuracy it trained to, else
    pass_accuracy; NaN: none), whether its best validation reached it (`passed`) and
    at the first attempt (`first_attempt`), its attempts, and `steps`: every step it trained, retries included, so for
    a unit that passed its steps to target; a ramped stage's own row counts its ramp's lengths too (`steps` of the
    whole stage). `order` keeps the units in training order."""
    from vlbind.core.files import read_json

    rows = []
    for p in meta_paths:
        meta = read_json(p, "model meta.json")
        cfg, run = meta.get("train_config", {}), Path(p).parent.parent.name
        target = cfg.get("target_accuracy")
        bar = target if target is not None else cfg.get("pass_accuracy")
        units = [(f"{meta['stage']}_n{r['max_objects']}", bar, r["steps"], r["best_val_accuracy"],
                  attempt_count(r)) for r in meta.get("ramp") or []]
        units.append((meta["stage"], bar, meta["steps"] + meta.get("ramp_steps", 0), meta["best_val_accuracy"],
                      attempt_count(meta)))
        for i, (unit, unit_bar, steps, best, attempts) in enumerate(units):
            ok = unit_bar is None or (best is not None and best >= unit_bar)
            rows.append({"run": run, "stage": meta["stage"], "unit": unit, "order": i, "bar": unit_bar,
                         "best_val_accuracy": best, "passed": bool(ok), "first_attempt": bool(ok and attempts == 1),
                         "attempts": attempts, "steps": steps})
    return pd.DataFrame(rows, columns=["run", "stage", "unit", "order", "bar", "best_val_accuracy", "passed",
                                       "first_attempt", "attempts", "steps"])


def seed_table(units: pd.DataFrame, stage_order: list[str]) -> pd.DataFrame:
    """Per unit over runs (seeds), from unit_outcomes: runs, the pass fraction at the first attempt and with retries,
    runs retried, and over the runs that passed the median and max steps to target (NaN where none passed); units in
    training order (`stage_order`, then each stage's ramp)."""
    def summary(g: pd.DataFrame) -> pd.Series:
        steps = g.loc[g["passed"], "steps"]
        return pd.Series({"runs": len(g), "first_attempt_pass": g["first_attempt"].mean(),
                          "pass_with_retries": g["passed"].mean(), "retried_runs": int((g["attempts"] > 1).sum()),
                          "median_steps_to_target": steps.median() if len(steps) else np.nan,
                          "max_steps_to_target": steps.max() if len(steps) else np.nan})

    table = units.groupby("unit").apply(summary, include_groups=False)
    table = table.astype({"runs": int, "retried_runs": int})
    return table.loc[unit_order(units, stage_order)].reset_index()


def unit_order(units: pd.DataFrame, stage_order: list[str]) -> list[str]:
    """The units of unit_outcomes in training order: by stage (`stage_order`), then a stage's ramp lengths before its
    own length."""
    rank = {s: i for i, s in enumerate(stage_order)}
    key = units.assign(rank=units["stage"].map(rank)).groupby("unit")[["rank", "order"]].first()
    return list(key.sort_values(["rank", "order"]).index)


def run_summary(ood_table: pd.DataFrame) -> str:
    """What the DAG prints when it finishes, from ood_accuracy.csv (columns order, variant, runs, ood_mean,
    ood_se, diverged_runs, unconverged_runs, retried_runs): per prompt order and variant, how many runs converged, the
    mean ± SE of their OOD accuracy, and how many runs needed a retry (vlbind.training.attempts)."""
    lines = ["runs converged and OOD accuracy (results/tables/ood_accuracy.csv):"]
    for r in ood_table.itertuples():
        total = r.runs + r.diverged_runs + r.unconverged_runs
        ood = f"OOD {100 * r.ood_mean:.1f} ± {100 * r.ood_se:.1f} %" if r.runs > 1 else (
            f"OOD {100 * r.ood_mean:.1f} %" if r.runs else "no OOD mean")
        stalled = getattr(r, "stalled_runs", 0)
        why = f", {stalled} of them {STALLED}" if stalled else ""
        retried = getattr(r, "retried_runs", 0)
        lines.append(f"  {r.order:<9} {r.variant:<18} {r.runs} of {total} runs converged"
                     f"{f' ({r.diverged_runs} diverged{why})' if r.diverged_runs else ''}, {ood}"
                     f"{f'; {retried} of {total} needed a retry' if retried else ''}")
    return "\n".join(lines)


ELAPSED = re.compile(r"^Elapsed time: (?:(\d+) days?, )?(\d+):(\d+):(\d+(?:\.\d+)?)$", re.M)
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)", re.M)  # a vlbind log line's time (core.logs)


def scheduler_runs(log_dir: str | Path) -> pd.DataFrame:
    """One row per Snakemake run of a working directory that had jobs to run, oldest first, from Snakemake's own log
    of each (`.snakemake/log/<start>.snakemake.log`; an --unlock's, a dry run's and one with nothing to do are left
    out): `log`, the file's name; `started`, the time in its name (the machine's local time); `ended` and
    `ended_from`, how that is known: "exit" from the `Elapsed time` line Snakemake writes as it exits (done, stopped
    or failed); where it never exited (killed outright), the later of its log's last write ("last write") and the
    last line its jobs logged before a later run took them over ("job log": the jobs' log files and the logs beside
    their outputs, a training stage's train.log; within a few minutes of the kill, as a training job logs every
    validation); `minutes`; `jobs`, the jobs it finished; `outcome`: done (every job), stopped (a TERM or Ctrl-C: it
    ended its running jobs and exited), failed (a job failed) or "no exit" (killed outright, or still running)."""
    log_dir = Path(log_dir)
    runs = []
    for path in sorted(log_dir.glob("*.snakemake.log")):
        text = path.read_text(errors="replace")
        if "Job stats:" in text and "This was a dry-run" not in text:
            outputs = {o for line in re.findall(r"^ +output: (.+)$", text, re.M) for o in line.split(", ")}
            runs.append((path, text, datetime.strptime(path.name.split(".snakemake")[0], "%Y-%m-%dT%H%M%S.%f"),
                         outputs, re.findall(r"^ +log: (.+)$", text, re.M)))
    rows = []
    for i, (path, text, started, outputs, logs) in enumerate(runs):
        if m := ELAPSED.search(text):
            days, h, mi, s = (float(g or 0) for g in m.groups())
            ended, ended_from = started + timedelta(days=days, hours=h, minutes=mi, seconds=s), "exit"
        else:
            ended, ended_from = datetime.fromtimestamp(path.stat().st_mtime), "last write"
            until = min((r[2] for r in runs[i + 1:] if r[3] & outputs), default=datetime.max)
            files = {log_dir.parent.parent / f for f in logs}
            files |= {f for o in outputs for f in (log_dir.parent.parent / o).parent.glob("*.log")}
            stamps = [datetime.fromisoformat(t) for f in files if f.is_file()
                      for t in STAMP.findall(f.read_text(errors="replace"))]
            if (last := max((t for t in stamps if started <= t < until), default=None)) and last > ended:
                ended, ended_from = last, "job log"
        if not m:
            outcome = "no exit"
        elif "Will exit after finishing currently running jobs" in text or "Terminating processes on user" in text:
            outcome = "stopped"
        elif "Error in rule" in text or "Exiting because a job execution failed" in text:
            outcome = "failed"
        else:
            outcome = "done"
        rows.append({"log": path.name, "started": started, "ended": ended, "ended_from": ended_from,
                     "minutes": (ended - started).total_seconds() / 60, "jobs": text.count("Finished jobid:"),
                     "outcome": outcome})
    return pd.DataFrame(rows, columns=["log", "started", "ended", "ended_from", "minutes", "jobs", "outcome"])


def stretches(runs: pd.DataFrame) -> pd.DataFrame:
    """The spans in which at least one scheduler of `runs` (scheduler_runs) ran: schedulers that overlap (seeds side
    by side) merge into one stretch. Per stretch its start, end, minutes, schedulers, jobs finished, and how many of
    its schedulers never exited (`ends_unlogged`: their end is the last line they or their jobs logged; the stretch
    ran at least that long)."""
    out: list[dict] = []
    for r in runs.sort_values("started").itertuples():
        if out and r.started <= out[-1]["ended"]:
            s = out[-1]
            s["ended"] = max(s["ended"], r.ended)
            s["schedulers"] += 1
            s["jobs"] += r.jobs
            s["ends_unlogged"] += r.ended_from != "exit"
        else:
            out.append({"started": r.started, "ended": r.ended, "schedulers": 1, "jobs": r.jobs,
                        "ends_unlogged": int(r.ended_from != "exit")})
    table = pd.DataFrame(out, columns=["started", "ended", "schedulers", "jobs", "ends_unlogged"])
    table.insert(2, "minutes", (table["ended"] - table["started"]).dt.total_seconds() / 60)
    return table

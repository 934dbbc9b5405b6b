"""How a stage's training is split into units, and how a unit that fails is retried (neither is in the paper).

A unit is a stage, or one length of its length ramp (`train.ramp`: the task on min_objects objects first, then one
more at a time, each length starting from the last one's weights). The retry rule (`train.attempts`): an attempt of a
unit that ends with its best validation below the unit's pass bar (`target_accuracy`, else `pass_accuracy`; a unit
with neither cannot fail) starts again from the weights the unit started from, with a fresh data stream (the attempt
index enters the data RNG and the resume key), a fresh AdamW and the last attempt's lr times `retry_lr_factor`, up
to `attempts` attempts. An attempt with a retry left also ends on the stall rule (train._Progress): `stall_steps`
steps without a validation gain of `stall_gain`, or with every validation within `stall_margin` of chance since its
start phase (divergence.stall_margin; in a stage whose validation mixes kinds of prompt, on its retrieval prompts:
train.Validation); the last attempt runs to the stop rule as a stage without retries does.

Steps: the unit's cap (`max_steps`) counts the steps of every attempt that did not stall; an attempt the stall rule
ends gives its steps back, so the retry it makes room for has the steps it did not use (a stall is judged before the
cap is reached: config.validate checks that the window fits). A ramp's lengths share the stage's cap, every step
counted. Worst case: a unit trains at most `attempts` x its cap (two attempts stall just before the cap, the third
runs to it), a ramp's stage the same (once a length has spent the stage's cap, the lengths after it have none).
The unit keeps the first attempt that passes, else the one with the best validation (the run is then marked as
without the rule: outcomes.divergence, the convergence bar).

Files: with the rule on, each attempt is a stage directory of its own, `{unit}/attempts/a{k}` (model, meta.json,
metrics.parquet with an `attempt` column, its resume state while it trains); the unit's directory holds the kept
attempt's weights, the attempts' curves one after another (the `attempt` column tells them apart) and a meta.json
whose `steps` count every attempt (what a ramp's cap counts), `attempt` names the kept one and `attempts` lists each
(steps, why it stopped, best validation). A first attempt trains exactly as a stage without the rule: same data,
same weights. A kill resumes in the middle of any attempt; attempts and lengths made with other settings or starting
weights are discarded (their `key.json`).

`stall_end` and `expected_steps_to_pass` replay the stall rule on recorded validation curves (its calibration,
docs/results/retries.md), `plateau_end` the plateau rule (the stop rule of a stage without a target).
"""

from __future__ import annotations

import logging
import math
import shutil
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pandas as pd

from vlbind.core.files import read_json, write_json
from vlbind.core.settings import NON_FINITE
from vlbind.data.spec import StageSpec
from vlbind.model.checkpoint import META_FILE, METRICS_FILE, MODEL_FILE, load_tensors, save_model
from vlbind.training.config import TrainConfig, attempt_count
from vlbind.training.loop import STALLED, gain_impossible, train_attempt
from vlbind.training.resume import settings_key

log = logging.getLogger(__name__)
RAMP_DIR = "ramp"  # a ramped stage's shorter lengths, each a unit directory of its own, n{max_objects}
KEY_FILE = "key.json"


def train_stage(model, spec: StageSpec, cfg: TrainConfig, out_dir: Path, *, stage: str, **kwargs) -> dict:
    """Train one stage (every stage's entry point): train_unit, or with `cfg.ramp` a length ramp: the task on
    min_objects objects, then on min_objects..n for n = min_objects + 1, ..., max_objects - 1, each a unit of its own
    in out_dir/ramp/n{n} (named `{stage}_n{n}`; a fresh AdamW with its warm-up, as every stage), then the stage
    itself. Every length ends by the stop rule (target, plateau, or the cap, which is the whole ramp's: `max_steps`
    less the steps already taken, retries included) and the next starts from its weights; a length whose kept attempt
    ended on non-finite steps ends the ramp early.
    The stage's meta lists the lengths before it (`ramp`: max_objects, steps, stopped_because, best_val_accuracy,
    skipped_steps, wall_seconds, attempts) and `ramp_steps`, their sum. A rerun (after a kill) keeps the lengths
    already done if the stage's settings and starting weights are those they were made from, and discards them
    otherwise.

    On shuffled lists, a model from fixed-order text_s3 stays at chance on 2..8 objects from the start, and leaves
    it with the ramp (docs/results/text-s4.md). kwargs go to train_attempt (`start` applies to the first length)."""
    if not cfg.ramp or spec.min_objects == spec.max_objects or cfg.max_steps == 0:
        return train_unit(model, spec, cfg, out_dir, stage=stage, **kwargs)
    out_dir = Path(out_dir)
    ramp_dir = _keyed_dir(out_dir / RAMP_DIR, settings_key(stage, spec, cfg, model, kwargs.get("parent"),
                                                           kwargs.get("start")), stage)
    lengths = []
    for n in range(spec.min_objects, spec.max_objects):
        sub = ramp_dir / f"n{n}"
        if (sub / META_FILE).is_file():  # done before a kill: its weights, not a second training
            model.load_state_dict(load_tensors(sub / MODEL_FILE)[0])
            meta = read_json(sub / META_FILE, "ramp length meta.json")
            log.info("%s: length %d..%d already trained (%s), kept", stage, spec.min_objects, n, sub)
        else:
            left = max(cfg.max_steps - sum(x["steps"] for x in lengths), 0)
            meta = train_unit(model, replace(spec, max_objects=n), replace(cfg, max_steps=left), sub,
                              stage=f"{stage}_n{n}", **kwargs)
        kwargs.pop("start", None)
        lengths.append({k: meta[k] for k in ("steps", "stopped_because", "best_val_accuracy", "wall_seconds")}
                       | {"skipped_steps": meta.get("skipped_steps", 0), "max_objects": n}  # 0: a length made before
                       | {"attempts": attempt_count(meta)})
        if meta["stopped_because"] == NON_FINITE:
            break
    ramp_steps = sum(x["steps"] for x in lengths)
    last = replace(cfg, max_steps=max(cfg.max_steps - ramp_steps, 0))
    return train_unit(model, spec, last, out_dir, stage=stage,
                      record={"train_config": asdict(cfg), "ramp": lengths, "ramp_steps": ramp_steps}, **kwargs)


def as_long_as(cfg: TrainConfig, twin: dict) -> TrainConfig:
    """`cfg` for a stage that trains as long as its twin's kept weights did (a noise control: stages.NOISE_CONTROL),
    from the twin's meta.json: the steps those weights trained from the parent (`kept_step`, in the attempt it kept)
    at that attempt's lr (a retry's lr x retry_lr_factor per retry before it), one attempt, no stop before those steps
    (no target, a plateau window longer than them), and the last step's weights kept. Kept by its own validation
    (`keep: best`), the control would keep whichever step validated highest: on its parent's task, learnt from its
    first step, that is any step, often an early one, and its weights would not have trained as long."""
    if twin.get("ramp"):
        raise ValueError(f"{twin['stage']} trained a length ramp: a stage cannot train as long as it")
    kept = twin.get("attempt", 1)
    steps = twin["kept_step"]
    lr = twin["train_config"]["lr"] * twin["train_config"]["retry_lr_factor"] ** (kept - 1)
    return replace(cfg, max_steps=steps, lr=lr, attempts=1, attempt=1, target_accuracy=None,
                   patience=steps // cfg.eval_every + 1, keep="last")


def passed(meta: dict, bar: float | None) -> bool:
    """Whether an attempt (its meta) reached the pass bar; one of a unit without a bar always passes."""
    return bar is None or meta["best_val_accuracy"] >= bar  # NaN (no finite validation) fails


def train_unit(model, spec: StageSpec, cfg: TrainConfig, out_dir: Path, *, stage: str, record: dict | None = None,
               **kwargs) -> dict:
    """Train one unit (a stage, or one length of its ramp) into `out_dir` under the retry rule (module doc); return
    its meta. Without the rule (`attempts` 1), a unit that cannot fail (no pass bar) or one that trains no step it is
    train_attempt itself, files and all. kwargs go to train_attempt (`optimizer`, a state carried over, to the first
    attempt only); `record` to the unit's meta."""
    if cfg.attempts == 1 or cfg.pass_bar is None or cfg.max_steps == 0:
        return train_attempt(model, spec, cfg, out_dir, stage=stage, record=record, **kwargs)
    out_dir = Path(out_dir)
    tries = _keyed_dir(out_dir / "attempts", settings_key(stage, spec, cfg, model, kwargs.get("parent"),
                                                          kwargs.get("start")), stage)
    start_weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    metas: list[dict] = []
    for k in range(1, cfg.attempts + 1):
        sub = tries / f"a{k}"
        if (sub / META_FILE).is_file():  # done before a kill
            meta = read_json(sub / META_FILE, "attempt meta.json")
            log.info("%s: attempt %d already trained (%s), kept", stage, k, sub)
        else:
            left = cfg.max_steps - sum(m["steps"] for m in metas if m["stopped_because"] != STALLED)
            if left <= 0:
                break
            if k > 1:
                log.info("%s: attempt %d of %d from the unit's starting weights, a fresh data stream and AdamW, lr x "
                         "%g (%d steps left of the cap)", stage, k, cfg.attempts, cfg.retry_lr_factor ** (k - 1), left)
                kwargs.pop("optimizer", None)
            model.load_state_dict(start_weights)
            retry = replace(cfg, max_steps=left, attempt=k, lr=cfg.lr * cfg.retry_lr_factor ** (k - 1))
            meta = train_attempt(model, spec, retry, sub, stage=stage, **kwargs)
        metas.append(meta)
        if passed(meta, cfg.pass_bar):
            break
    kept = next((i for i, m in enumerate(metas) if passed(m, cfg.pass_bar)),
                max(range(len(metas)), key=lambda i: _or(metas[i]["best_val_accuracy"], -1.0)))
    model.load_state_dict(load_tensors(tries / f"a{kept + 1}" / MODEL_FILE)[0])
    curve = pd.concat([pd.read_parquet(tries / f"a{i + 1}" / METRICS_FILE) for i in range(len(metas))],
                      ignore_index=True)
    meta = {**metas[kept], "train_config": asdict(cfg), "steps": sum(m["steps"] for m in metas),
            "wall_seconds": sum(m["wall_seconds"] for m in metas), "attempt": kept + 1,
            "attempts": [{"attempt": i + 1, "steps": m["steps"], "stopped_because": m["stopped_because"],
                          "best_val_accuracy": m["best_val_accuracy"]} for i, m in enumerate(metas)],
            **(record or {})}
    save_model(out_dir, model, meta, curve)
    if len(metas) > 1:
        log.info("%s: %d attempts (%s); kept attempt %d", stage, len(metas), ", ".join(
            f"{a['steps']} steps to {a['best_val_accuracy']:.4f}, {a['stopped_because']}" for a in meta["attempts"]),
            kept + 1)
    return meta


def _or(x: float, default: float) -> float:
    return default if x is None or math.isnan(x) else x


def _keyed_dir(path: Path, key: str, stage: str) -> Path:
    """`path`, emptied first if it holds work made with another settings key (KEY_FILE), and keyed with `key`."""
    key_file = path / KEY_FILE
    if path.exists() and (not key_file.is_file() or read_json(key_file, "settings key").get("key") != key):
        log.warning("%s: discarding %s, made with other settings or starting weights", stage, path)
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    write_json(key_file, {"key": key})
    return path


# Replaying the stall rule on recorded validation curves (its calibration: docs/results/retries.md)

def stall_end(steps: np.ndarray, acc: np.ndarray, bar: float, stall_steps: float, gain: float,
              chance: float | None = None, margin: float | None = None, start: int = 0) -> int | None:
    """The step at which the stall rule (train._Progress.validate) ends an attempt whose validations are `acc` at
    `steps`, or None where the curve reaches `bar` first or ends before the rule fires. stall_steps inf: never. With
    `chance` and `margin`, its second clause too: every validation within `margin` of `chance` for stall_steps steps
    since the last one of the start phase (its first `start` steps), or the first."""
    ref, ref_step, above_step = -1.0, 0, -1
    for s, a in zip(steps, acc):
        if a >= bar:
            return None
        if a >= ref + gain or ref < 0:
            ref, ref_step = a, s
        if margin is None or chance is None or a > chance + margin or s <= start or above_step < 0:
            above_step = s
        if s - ref_step >= stall_steps or s - above_step >= stall_steps:
            return int(s)
    return None


def plateau_end(steps: np.ndarray, acc: np.ndarray, patience: int, every: int, min_delta: float,
                chance: float = 0.0, above_chance: float = 0.0) -> tuple[int, int] | None:
    """(the step at which the plateau rule, train._Progress.validate's, ends a curve whose validations are `acc` at
    `steps` every `every` steps, the step of the best validation it keeps), or None where the curve ends first: no
    gain of `min_delta` over the best for `patience` validations, once the best lies `above_chance` over `chance`;
    at once where no validation can make that gain (loop.gain_impossible; the stall rule is not replayed here)."""
    best, best_step = -1.0, 0
    for s, a in zip(steps, acc):
        if a >= best + min_delta or best < 0:
            best, best_step = a, s
        waited = s - best_step >= patience * every or gain_impossible(best, min_delta)
        if waited and (not above_chance or best >= chance + above_chance):
            return int(s), int(best_step)
    return None


def replay(curve: pd.DataFrame, bar: float, stall_steps: float, gain: float, cap: int | None,
           chance: float | None = None, margin: float | None = None) -> tuple[int, bool]:
    """(steps, passed) of one recorded attempt (`step`, `val_accuracy`) under the stall rule (stall_end, the second
    clause with `chance` and `margin`): it passes at the first validation at `bar`, ends where the rule fires, or
    fails at its last recorded step (or at `cap` when given)."""
    steps, acc = curve["step"].to_numpy(), curve["val_accuracy"].to_numpy()
    end = stall_end(steps, acc, bar, stall_steps, gain, chance, margin)
    if end is not None:
        return end, False
    hit = np.flatnonzero(acc >= bar)
    if len(hit):
        return int(steps[hit[0]]), True
    return int(cap if cap is not None else steps[-1]), False


def expected_steps_to_pass(curves: list[pd.DataFrame], bar: float, stall_steps: float, gain: float,
                           cap: int | None = None) -> float:
    """Expected steps until an attempt passes when each attempt is a fresh draw from `curves` (recorded attempts of
    one unit, e.g. a ramp length over seeds) and every attempt that fails is retried without end: the mean steps an
    attempt costs over the chance it passes (a geometric number of attempts; Luby et al. 1993). inf where none
    passes. The draws are an assumption: a retry starts from the same weights, so its outcome may follow the first's."""
    results = [replay(c, bar, stall_steps, gain, cap) for c in curves]
    passes = sum(p for _, p in results)
    return math.inf if not passes else sum(s for s, _ in results) / passes

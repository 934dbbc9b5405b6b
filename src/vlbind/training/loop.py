"""One attempt at one task (`train_attempt`; appendix D.2): AdamW without weight decay, gradient clipping, linear
warm-up then a constant learning rate (training.optim), the losses of training.losses, validation every `eval_every`
steps and early stopping. A stage is one or more attempts (training.attempts.train_stage: its ramp's lengths, retries).

Validation reads the task a stage is judged on (`Validation`): where its prompts mix kinds (retrieval and grounding;
image and text contexts), it records the accuracy of each kind, with its chance and prompt count, and every rule reads
the retrieval prompts' accuracy (`val_accuracy`; the mixed one is `val_accuracy_all`): a model that answers grounding
and guesses retrieval has learnt nothing of the task the DAG evaluates. A stage of one kind has one accuracy.

An attempt stops at the first of: validation reaching `target_accuracy`, a plateau (no gain of `min_delta` over the best
for `patience` validations), the stall rule (training.attempts) or `max_steps`; `max_steps` 0 passes the starting
weights through, validated once. A plateau that is certain stops at once: where no validation can gain `min_delta` over
the best (best + min_delta > 1, e.g. a validation of 1.000), the rule would end the attempt `patience` validations later
with the same kept weights, and those steps are not trained (not under `keep: "last"`, whose weights are the last
step's, nor while the stall rule can still end the attempt). It keeps the weights of the best validation (`keep:
"best"`, the paper's early stopping) or of the last step (`keep: "last"`: a fixed budget, for a task the starting model
already solves). Its state (weights, optimizer, data RNG, curve) is saved atomically every `checkpoint_every` steps
(training.resume): a killed run resumes to the weights of an uninterrupted one; a state made with other settings is
discarded (a raised `max_steps` is not one). Stopped by SIGTERM (training.resume.StopSignal), an attempt ends its step,
saves its state, the losses since its last validation included, and exits (status 143): resumed, it repeats no step. A
stop in the step that ends the attempt saves the state marked ended and exits before the stage's files (a scheduler
deletes a stopped job's outputs): the rerun writes them from it without a step.

Dense supervision (`queries: "all"`, not in the paper): each training prompt queries every object of its context in
one packed sequence (tasks.pack_queries); validation stays single-query.

A step whose loss or gradient is not finite is skipped, the weights and the optimizer state unchanged, without a
wait on the device; its batch and its step count, so data and schedule keep their steps. metrics.parquet counts the
skipped steps between validations, meta.json the attempt's; more than `max_skipped_steps` end it at the next
validation ("non_finite") with its best finite validation's weights.
"""

from __future__ import annotations

import logging
import math
import signal
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch

from vlbind import __version__
from vlbind.core.settings import NON_FINITE
from vlbind.data.batching import batch_sizes, by_length
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import GROUNDING, IMAGE, RETRIEVAL, TEXT, Batch, Role, generate, pack_queries
from vlbind.model.checkpoint import save_model
from vlbind.model.inference import correct
from vlbind.model.transformer import Transformer
from vlbind.training.config import TrainConfig
from vlbind.training.losses import training_loss
from vlbind.training.optim import lr_at, make_optimizer, optimizer_step
from vlbind.training.resume import RESUME_FILE, StopSignal, fingerprint, load_resume, save_resume, settings_key

if TYPE_CHECKING:
    from vlbind.data.bank import ImageBank

log = logging.getLogger(__name__)
STALLED = "stalled"  # an attempt ended by the stall rule (TrainConfig.stall_steps), to be retried
PART = "val_accuracy_"  # metrics.parquet's column of a validation part's accuracy (Validation), e.g. ..._grounding


def validation_set(spec: StageSpec, cfg: TrainConfig, chunk: int = 256, bank: ImageBank | None = None) -> list[Batch]:
    """A fixed validation set of single-query prompts of the stage's own task as validation measures it
    (StageSpec.for_validation: no practice prompts; text retrieval queried by color), drawn from its own RNG stream
    so it never overlaps the training stream's state."""
    rng = np.random.default_rng([cfg.seed, 0xA11D])
    return [generate(spec.for_validation(), s, rng, bank=bank) for s in batch_sizes(cfg.val_size, chunk)]


KIND_NAMES, MODALITY_NAMES = {RETRIEVAL: "retrieval", GROUNDING: "grounding"}, {TEXT: "text", IMAGE: "image"}


@dataclass(frozen=True)
class Validation:
    """A stage's validation set and how it is read. `parts`: a mask over its prompts (in order) for each kind of prompt
    it mixes, `all` of them, each prompt kind (`retrieval`, `grounding`) and, where it mixes text and image contexts,
    each kind in each (`image_retrieval`, `text_grounding`, ...); none where every prompt is of one kind and context (a
    text retrieval stage, grounding). `judged`: the part the stop rules, the pass bar and the divergence mark read
    (StageSpec.judged); None: every prompt."""
    batches: list[Batch]
    parts: dict[str, np.ndarray]
    judged: str | None

    @classmethod
    def of(cls, batches: list[Batch], judged: str | None) -> Validation:
        """The validation set `batches` of a task whose rules read its part `judged` (StageSpec.judged)."""
        if judged is None:
            return cls(batches, {}, None)
        kind, modality = (np.concatenate([getattr(b, k) for b in batches]) for k in ("kind", "modality"))
        kinds, modalities = np.unique(kind), np.unique(modality)
        parts = {"all": np.ones(len(kind), dtype=bool)} | {KIND_NAMES[k]: kind == k for k in kinds}
        if len(modalities) > 1:
            cells = {f"{MODALITY_NAMES[m]}_{KIND_NAMES[k]}": (modality == m) & (kind == k) for m in modalities
                     for k in kinds}
            parts |= {name: mask for name, mask in cells.items() if mask.any()}
        if judged not in parts:
            raise ValueError(f"the validation set's {len(kind)} prompts hold no {judged} prompt, which the stop rules "
                             "read: raise train.val_size")
        return cls(batches, parts, judged)

    def mask(self, part: str | None) -> np.ndarray:
        n = sum(len(b) for b in self.batches)
        return np.ones(n, dtype=bool) if part is None else self.parts[part]

    def chance(self, part: str | None = None) -> float:
        """Accuracy of a guess among each prompt's objects, the mean of 1 / objects, over `part` (default: all)."""
        return float(np.mean(np.concatenate([1 / b.n_objects for b in self.batches])[self.mask(part)]))

    def read(self, hits: np.ndarray) -> tuple[float, dict[str, float]]:
        """(the judged accuracy, {part: accuracy}) of per-prompt results `hits` (inference.correct)."""
        return float(hits[self.mask(self.judged)].mean()), {p: float(hits[m].mean()) for p, m in self.parts.items()}

    def describe(self) -> dict:
        """meta.json's `val_parts`: each part's prompt count and chance."""
        return {p: {"prompts": int(m.sum()), "chance": self.chance(p)} for p, m in self.parts.items()}


def compiled(model: Transformer, device) -> torch.nn.Module:
    """`model` with its forward compiled by torch.compile: on CUDA in "reduce-overhead" mode (CUDA graphs, one
    per batch shape: the step's kernels replay without the host launching each), elsewhere in the default mode.
    It shares the model's parameters; the weights it trains differ from eager ones by rounding only (test)."""
    return torch.compile(model, mode="reduce-overhead" if str(device).startswith("cuda") else None)


def train_attempt(model: Transformer, spec: StageSpec, cfg: TrainConfig, out_dir: Path, *, stage: str,
                device="cpu", parent: str | None = None, bank: ImageBank | None = None,
                start: tuple[StageSpec, int] | None = None, callback: Callable[[int], None] | None = None,
                optimizer: torch.optim.Optimizer | None = None, record: dict | None = None) -> dict:
    """Train `model` in place on prompts from `spec` (image contexts read from `bank`); write the stage's
    model directory; return its meta. `start` = (spec, steps), not in the paper: the first `steps` training
    batches come from that spec instead (validation always from `spec`). Batches are drawn in the loop: a
    background thread drawing them ahead gained nothing on a CPU nor on an H100 (eager; removed, measured in
    docs/results/benchmarks-train-loop.md), where the eager step is bound by the host's launching of kernels.
    Between validations nothing waits on the device: losses and gradient norms stay there and are read at each
    validation.

    `callback(step)` runs after every optimizer step (tests use it to simulate a kill or inject a NaN).
    `optimizer` (not in the paper; default a fresh AdamW, make_optimizer): one over `model`'s parameters whose state
    carries over from the parent stage; its learning rate follows `cfg` (warm-up included) from this stage's step 1.
    `record`: entries the meta adds or replaces (attempts.train_stage: the ramp's lengths and the whole stage's
    settings).

    In three parts: where the stage stands (`_Progress`: fresh, or resumed from a saved state made with the same
    settings), the loop of steps (`_step`) with a validation and the stop rule (`_Progress.validate`) every
    `eval_every`, and the stage's files (`_finish`).
    """
    out_dir = Path(out_dir)
    model.to(device).train()
    opt = make_optimizer(model, cfg) if optimizer is None else optimizer
    # a retry draws a fresh data stream; the first attempt's is the one a stage without retries draws
    rng = np.random.default_rng([cfg.seed, int(fingerprint(stage), 16) % (2**32)] + [cfg.attempt] * (cfg.attempt > 1))
    start_spec, start_steps = start if start is not None else (spec, 0)
    key = settings_key(stage, spec, cfg, model, parent, start)
    ckpt_every = math.ceil(cfg.checkpoint_every / cfg.eval_every) * cfg.eval_every
    progress = _Progress.resume_or_start(out_dir / RESUME_FILE, key, model, opt, rng, stage, start_steps)
    val_bank = None
    if bank is not None:  # validation shows renderings that training never does
        bank, val_bank = bank.split(cfg.val_images)
    val = Validation.of(validation_set(spec, cfg, bank=val_bank), spec.for_validation().judged)
    val_chance = val.chance(val.judged)
    net = compiled(model, device) if cfg.compile else model  # validation stays eager: its shapes differ
    t0, t_last, step_last = time.time(), time.time(), progress.step
    losses, skips = progress.pending(device)  # since the last validation: none, unless a stop saved them
    with StopSignal() as stop_signal:
        while progress.step < cfg.max_steps and progress.ended is None:
            batch = generate(start_spec if progress.step < start_steps else spec, cfg.batch_size, rng, bank=bank)
            batch = pack_queries(batch) if cfg.queries == "all" else batch
            progress.step += 1
            step = progress.step
            loss, grad_norm, skipped = _step(net, model, opt, batch, cfg, step, device, bank)
            losses.append(loss)
            skips.append(skipped)
            if callback is not None:
                callback(step)
            validates = step % cfg.eval_every == 0 or step == cfg.max_steps
            if validates:
                acc, parts = val.read(correct(model, val.batches, device, cfg.precision, val_bank))
                now = time.time()
                rate = (step - step_last) / max(now - t_last, 1e-9)
                t_last, step_last = now, step
                stop = progress.validate(model, acc, torch.stack(losses), torch.stack(skips), grad_norm, rate, cfg,
                                         val_chance, parts)
                losses, skips = [], []
                _log_validation(stage, spec, cfg, progress, rate, batch, val.judged)
                if stop is not None:
                    progress.ended = stop
            if step == cfg.max_steps and progress.ended is None:
                progress.ended = "max_steps"
            # a stop saves the state even in the step that ends the attempt (marked ended) and exits before the
            # stage's files: a scheduler deletes a stopped job's outputs, so files written then would be lost with
            # the steps; the rerun writes them from this state without a step
            if (validates and step % ckpt_every == 0 and progress.ended is None) or stop_signal.received:
                save_resume(out_dir / RESUME_FILE, key, model, opt,
                            progress.saved(rng, time.time() - t0, losses, skips), progress.best_state)
            if stop_signal.received:
                log.info("%s: stopped by SIGTERM after step %d%s; its state is saved, to resume from", stage, step,
                         f" (the attempt ended: {progress.ended})" if progress.ended else "")
                raise SystemExit(128 + signal.SIGTERM)
    reason = progress.ended or "max_steps"  # max_steps 0: no step, the cap
    if not progress.history:  # max_steps 0: the starting weights pass through; record what they score
        progress.pass_through(*val.read(correct(model, val.batches, device, cfg.precision, val_bank)))
        log.info("%s: max_steps 0, weights passed through unchanged; val_acc %.4f", stage, progress.best_acc)
    what = {"stage": stage, "parent": parent, "stage_spec": spec.to_dict(), "train_config": asdict(cfg),
            "start": None if start is None else {"stage_spec": start_spec.to_dict(), "steps": start_steps},
            "model_config": model.cfg.to_dict()}
    how = {"stopped_because": reason, "val_chance": val_chance, "skipped_steps": progress.skipped,
           "resumed": progress.resumed, "wall_seconds": progress.wall_before + time.time() - t0,
           "vlbind_version": __version__}
    return _finish(model, progress, cfg, what, how | (record or {}), out_dir, val)


def _step(net, model: Transformer, opt, batch: Batch, cfg: TrainConfig, step: int, device, bank):
    """One optimizer step (the `step`-th) on `batch`: the loss through `net` (the model, or its compiled forward),
    where `cfg.sub_batch_tokens` is set on length-sorted sub-batches of at most that many positions (the batch's
    loss, a mean over its prompts, with little padding: batching.by_length), gradients clipped, the learning rate of
    `step`, non-finite steps skipped (optimizer_step). Returns the loss,
    the gradient norm and whether the step was skipped, all left on the device."""
    parts = by_length(batch, cfg.sub_batch_tokens) if cfg.sub_batch_tokens else [batch]
    loss = sum(training_loss(net, part, cfg, device, bank) * (len(part) / len(batch)) for part in parts)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    for g in opt.param_groups:
        g["lr"] = lr_at(step, cfg)
    return loss.detach(), grad_norm, optimizer_step(opt, loss, grad_norm)


def _log_validation(stage: str, spec: StageSpec, cfg: TrainConfig, progress: _Progress, rate: float,
                    batch: Batch, judged: str | None) -> None:
    h = progress.history[-1]
    parts = "".join(f", {k.removeprefix(PART)} {v:.4f}" for k, v in h.items() if k.startswith(PART))
    parts = f" ({judged}{parts})" if judged else ""
    log.info("%s step %d/%d objects %d..%d loss %.4f val_acc %.4f%s best %.4f@%d skipped %d | %.1f steps/s, "
             "%.0f tok/s, ETA to cap %s", stage, h["step"], cfg.max_steps, spec.min_objects, spec.max_objects,
             h["train_loss"], h["val_accuracy"], parts, progress.best_acc, progress.best_step, progress.skipped, rate,
             rate * int((batch.roles != Role.PAD).sum()), _eta((cfg.max_steps - h["step"]) / max(rate, 1e-9)))


@dataclass
class _Progress:
    """Where a stage stands: steps done, the best validation and its weights, the curve; what a resume state
    holds besides the model, the optimizer and the data RNG."""
    best_state: dict
    step: int = 0
    best_acc: float = -1.0
    best_step: int = 0
    history: list = field(default_factory=list)
    wall_before: float = 0.0  # seconds trained before a resume
    resumed: bool = False
    gain_acc: float = -1.0  # the stall rule's reference: the validation of the last gain of stall_gain ...
    gain_step: int = 0  # ... and its step (TrainConfig.stall_steps)
    start_steps: int = 0  # the start phase (train_attempt's `start`): the at-chance window opens at its last
    chance_step: int = -1  # validation (or the first), then at each above chance + stall_margin; -1: not yet open
    pending_losses: list = field(default_factory=list)  # a state saved at a stop: the training losses and skipped
    pending_skips: list = field(default_factory=list)  # steps since the last validation, which its row will average
    ended: str | None = None  # why the attempt ended, once it has (a state saved by a stop in its last step has it)

    @classmethod
    def resume_or_start(cls, path: Path, key: str, model, opt, rng: np.random.Generator, stage: str,
                        start_steps: int = 0) -> _Progress:
        """From a saved state made with the same settings (loading the model, the optimizer and `rng` from it), or
        fresh: nothing done, the starting weights the best so far."""
        resumed = load_resume(path, key, model, opt)
        if resumed is None:
            return cls(best_state={k: v.detach().clone() for k, v in model.state_dict().items()},
                       start_steps=start_steps)
        saved, best_state = resumed
        rng.bit_generator.state = saved["rng_state"]
        log.info("resumed %s from step %d (best val acc %.4f)", stage, saved["step"], saved["best_acc"])
        return cls(best_state=best_state, step=saved["step"], best_acc=saved["best_acc"],
                   best_step=saved["best_step"], history=saved["history"],
                   wall_before=saved.get("wall_seconds", 0.0), resumed=True, gain_acc=saved.get("gain_acc", -1.0),
                   gain_step=saved.get("gain_step", 0), start_steps=start_steps,
                   chance_step=saved.get("chance_step", -1),  # a state saved before that clause: opens now
                   pending_losses=saved.get("pending_losses", []), pending_skips=saved.get("pending_skips", []),
                   ended=saved.get("ended"))

    def pending(self, device) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The training losses and skipped flags of the steps since the last validation that a stop saved (none at a
        regular save, which follows a validation), as the loop's own values: float32 on `device`."""
        return ([torch.tensor(x, dtype=torch.float32, device=device) for x in self.pending_losses],
                [torch.tensor(x, dtype=torch.float32, device=device) for x in self.pending_skips])

    @property
    def skipped(self) -> int:
        """Steps of the stage skipped so far (a non-finite loss or gradient)."""
        return sum(row.get("skipped_steps", 0) for row in self.history)

    def validate(self, model, acc: float, losses: torch.Tensor, skips: torch.Tensor, grad_norm: torch.Tensor,
                 rate: float, cfg: TrainConfig, val_chance: float, parts: dict[str, float] | None = None) -> str | None:
        """Record a validation (its judged accuracy `acc` with its chance `val_chance`, each part's accuracy `parts`
        (Validation), the training `losses` and which steps were skipped, `skips`, since the last one) and keep the
        weights if they are the best; return why the stage stops here, or None: more than max_skipped_steps skipped
        steps in the stage (the row's `finite` is then False), the target accuracy, an attempt's stall (STALLED: with a
        retry left and below its pass bar, no gain of stall_gain for stall_steps steps, or every validation within
        stall_margin of chance for stall_steps steps after the start phase; training.attempts), or a plateau (no gain
        of min_delta for `patience` validations, once validation has left chance by plateau_above_chance).
        `train_loss` is the mean over the steps that were not skipped."""
        trained, skipped = losses.double(), skips.bool()  # the one wait on the device between validations
        kept = trained[~skipped & torch.isfinite(trained)]
        self.history.append({"step": self.step, "train_loss": float(kept.mean()) if len(kept) else float("nan"),
                             "val_accuracy": acc, "lr": lr_at(self.step, cfg),
                             "grad_norm": float(grad_norm), "steps_per_s": rate, "skipped_steps": int(skipped.sum())}
                            | {PART + k: v for k, v in (parts or {}).items()})
        self.history[-1]["finite"] = self.skipped <= cfg.max_skipped_steps
        if not self.history[-1]["finite"]:  # these weights are never kept (_finish)
            return NON_FINITE
        if acc >= self.best_acc + cfg.min_delta or self.best_acc < 0:
            self.best_acc, self.best_step = acc, self.step
            self.best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        if cfg.target_accuracy is not None and acc >= cfg.target_accuracy:
            return "target_accuracy"
        if acc >= self.gain_acc + cfg.stall_gain or self.gain_acc < 0:
            self.gain_acc, self.gain_step = acc, self.step
        if cfg.stall_margin is None or acc > val_chance + cfg.stall_margin or self.step <= self.start_steps \
                or self.chance_step < 0:
            self.chance_step = self.step
        stall_armed = cfg.stall_steps is not None and cfg.attempt < cfg.attempts and cfg.pass_bar is not None \
            and self.best_acc < cfg.pass_bar
        if stall_armed:
            if self.step - self.gain_step >= cfg.stall_steps:
                log.info("stall rule: no validation gain of %g since step %d", cfg.stall_gain, self.gain_step)
                return STALLED
            if self.step - self.chance_step >= cfg.stall_steps:
                log.info("stall rule: validation within %g of chance (%.4f) since step %d", cfg.stall_margin,
                         val_chance, self.chance_step)
                return STALLED
        learning = not cfg.plateau_above_chance or self.best_acc >= val_chance + cfg.plateau_above_chance
        if (self.step - self.best_step) >= cfg.patience * cfg.eval_every and learning:
            return "plateau"
        if learning and cfg.keep == "best" and not stall_armed and gain_impossible(self.best_acc, cfg.min_delta):
            log.info("plateau certain: no validation can gain %g over the best, %.4f at step %d; the rule would keep "
                     "these weights after %d more validations", cfg.min_delta, self.best_acc, self.best_step,
                     cfg.patience - (self.step - self.best_step) // cfg.eval_every)
            return "plateau"
        return None

    def pass_through(self, acc: float, parts: dict[str, float]) -> None:
        """A stage of max_steps 0: the starting weights, validated once, are the stage's."""
        self.best_acc = acc
        self.history.append({"step": 0, "train_loss": float("nan"), "val_accuracy": acc, "lr": 0.0,
                             "grad_norm": float("nan"), "steps_per_s": float("nan"), "skipped_steps": 0}
                            | {PART + k: v for k, v in parts.items()} | {"finite": True})

    def saved(self, rng: np.random.Generator, seconds: float, losses: list[torch.Tensor],
              skips: list[torch.Tensor]) -> dict:
        """What a resume state records besides tensors (JSON metadata); `losses` and `skips`, the steps' since the last
        validation (float32 values: exact as JSON numbers)."""
        return {"step": self.step, "best_acc": self.best_acc, "best_step": self.best_step, "history": self.history,
                "rng_state": rng.bit_generator.state, "wall_seconds": self.wall_before + seconds,
                "gain_acc": self.gain_acc, "gain_step": self.gain_step, "chance_step": self.chance_step,
                "pending_losses": [float(x) for x in losses], "pending_skips": [float(x) for x in skips],
                "ended": self.ended}


def gain_impossible(best: float, min_delta: float) -> bool:
    """Whether no validation (an accuracy, at most 1) can gain `min_delta` over `best`: from there the plateau rule
    ends the attempt `patience` validations later with the weights it keeps now, unless a rule that ends it with those
    same weights comes first (the cap, too many skipped steps), so an attempt that keeps its best validation's weights
    and has no retry rule left to fire stops at once (module doc)."""
    return best + min_delta > 1.0


def _finish(model: Transformer, progress: _Progress, cfg: TrainConfig, what: dict, how: dict, out_dir: Path,
            val: Validation) -> dict:
    """Keep the weights `cfg.keep` says (the best validation's or the last step's; after too many skipped steps, the
    best finite validation's, or the starting weights where there was none: best step 0, best accuracy NaN),
    write the stage's model directory (weights; meta: `what` was trained, the steps and accuracies, `how` it
    ended, and where validation has parts, which one the rules read, `val_judged`, and each one's prompts, chance
    and kept weights' accuracy, `val_parts`; curve, with each part's accuracy, chance and prompts), drop its resume
    state; return the meta."""
    last = cfg.keep == "last" and how["stopped_because"] != NON_FINITE
    if not last:
        model.load_state_dict(progress.best_state)
    best_acc = progress.best_acc if progress.best_acc >= 0 else float("nan")  # -1: no finite validation
    best_row = next((h for h in progress.history if h["step"] == progress.best_step), {})  # {}: none finite
    kept = progress.history[-1] if last else {**best_row, "step": progress.best_step, "val_accuracy": best_acc}
    meta = {**what, "steps": progress.step, "best_step": progress.best_step, "best_val_accuracy": best_acc,
            "kept_step": kept["step"], "kept_val_accuracy": kept["val_accuracy"], **how}
    curve = pd.DataFrame(progress.history).assign(attempt=cfg.attempt)
    if val.parts:
        parts = val.describe()
        meta |= {"val_judged": val.judged, "val_parts": {p: {**d, "kept_accuracy": kept.get(PART + p, float("nan"))}
                                                         for p, d in parts.items()}}
        curve = curve.assign(**{f"val_chance_{p}": d["chance"] for p, d in parts.items()},
                             **{f"val_prompts_{p}": d["prompts"] for p, d in parts.items()})
    save_model(out_dir, model, meta, curve)
    (out_dir / RESUME_FILE).unlink(missing_ok=True)
    log.info("%s done: %s after %d steps, best val acc %.4f at step %d; kept the weights of step %d (%s)",
             meta["stage"], meta["stopped_because"], progress.step, best_acc, progress.best_step, kept["step"],
             "last" if last else "best")
    return meta


def _eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"

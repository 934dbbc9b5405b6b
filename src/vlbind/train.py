"""One training stage (appendix D.2): AdamW without weight decay, gradient clipping, linear warm-up then a
constant learning rate, cross-entropy on the [ANSWER] token only, validation every `eval_every` steps and
early stopping.

A stage stops at the first of: validation accuracy reaching `target_accuracy` (the curriculum's advance
criterion), a plateau (no gain of `min_delta` over the best for `patience` validations), or `max_steps`.
`max_steps` 0 skips a stage: its starting weights pass through, validated once on the stage's task.
The weights kept are those of the best validation (`keep: "best"`, the paper's early stopping) or of the last
step (`keep: "last"`: a fixed training budget, for a stage whose task its starting model already solves, where
the best validation could come before the stage changed anything). A length ramp (`ramp`, not in the paper;
attempts.train_ramped) trains the stage's task on min_objects objects first, then one more at a time. Training state
(weights, optimizer, data RNG, curve) is saved atomically every `checkpoint_every` steps and a killed run
resumes from it and reaches the same weights as an uninterrupted one; a saved state whose settings differ is
discarded, not resumed (a raised `max_steps` is not a difference: kill a stage, raise its cap, and it resumes).

A step whose loss or gradient is not finite is skipped: no weight and no optimizer state changes (the fused AdamW
skips it on the device, as under a GradScaler; nothing waits for the device to decide). Its batch is used up and
the step counted, so the data and the learning-rate schedule keep their steps. metrics.parquet counts the skipped
steps between validations, meta.json the stage's; a stage that has skipped more than `max_skipped_steps` ends at the
next validation ("non_finite"), with its best finite validation's weights.

Dense supervision (`queries: "all"`, not in the paper): each training prompt queries every object of its
context in one packed sequence (tasks.pack_queries), n labels for one pass; validation stays single-query.

Binding loss (`binding_loss` > 0, not in the paper): at each association item of a retrieval prompt the
model also predicts the attribute a query would name for that item's object (its color when the list is
keyed by shapes), weighted by `binding_loss`. The paper's only label is the answer, which rewards no
intermediate step (its appendix D.3); this one rewards binding each item to its object, after which the
answer is a one-step lookup of the query among the items.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from . import __version__
from .checkpoint import (
    load_optimizer_tensors,
    load_tensors,
    optimizer_tensors,
    read_metadata,
    save_model,
    save_tensors,
)
from .files import CorruptFileError
from .inference import accuracy, answer_logits
from .model import Transformer
from .schema import schema_defaults
from .settings import NON_FINITE, from_dict
from .tasks import BY_COLOR, RETRIEVAL, Batch, Role, StageSpec, batch_sizes, by_length, generate, pack_queries

if TYPE_CHECKING:
    from .bank import ImageBank

log = logging.getLogger(__name__)
RESUME_FILE = "resume.safetensors"
STALLED = "stalled"  # an attempt ended by the stall rule (TrainConfig.stall_steps), to be retried


# The settings a config may leave out (not in the paper, or off there): their one default is the schema's
# (schema.schema_defaults), which also keeps them out of a stage's params while they hold it.
_OPTIONAL = schema_defaults("train")


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 1e-3  # lost from the paper's text; our assumption
    warmup_steps: int = 2000
    batch_size: int = 32
    grad_clip: float = 1.0
    weight_decay: float = 0.0
    eval_every: int = 500
    val_size: int = 2048
    target_accuracy: float | None = None  # None: train until plateau or max_steps
    patience: int = 10
    min_delta: float = 0.001
    # > 0 (not in the paper): the plateau rule waits until the best validation exceeds chance by this much, so a
    # stage never stops in the chance phase that precedes learning; 0: it never waits
    plateau_above_chance: float = _OPTIONAL["plateau_above_chance"]
    max_steps: int = 200_000
    # a stage that skips more steps (a non-finite loss or gradient) ends (module doc)
    max_skipped_steps: int = _OPTIONAL["max_skipped_steps"]
    checkpoint_every: int = 2000  # rounded up to a multiple of eval_every
    precision: str = "fp32"  # "fp32" or "bf16" (autocast)
    # the training step's forward through torch.compile (CUDA: CUDA graphs); off: eager
    compile: bool = _OPTIONAL["compile"]
    # training prompts: "all" objects queried (pack_queries; config.yaml's [changed]) or "one" query each (the
    # paper's, which did not leave chance at text_s1: config.yaml)
    queries: str = _OPTIONAL["queries"]
    binding_loss: float = _OPTIONAL["binding_loss"]  # weight of the binding loss (module doc); 0: off (paper)
    keep: str = _OPTIONAL["keep"]  # weights kept: "best" validation (paper) or "last" step (module doc)
    # a plateau lowers the lr and training goes on (not in the paper; _Progress.validate): after this many
    # validations without a gain of min_delta (once validation has left chance by plateau_above_chance) the lr is
    # multiplied by lr_drop_factor, and again after as many more; None: off. The plateau stop (patience) stays
    lr_drop_patience: int | None = _OPTIONAL["lr_drop_patience"]
    lr_drop_factor: float = _OPTIONAL["lr_drop_factor"]
    # a length ramp (not in the paper; attempts.train_ramped): min_objects alone first, one more at a time
    ramp: bool = _OPTIONAL["ramp"]
    # the target_accuracy of the ramp's lengths before the stage's own (attempts.train_ramped); None: target_accuracy
    ramp_target: float | None = _OPTIONAL["ramp_target"]
    # the retry rule (not in the paper; vlbind.attempts): up to `attempts` attempts of a stage (or ramp length) that
    # ends below its pass bar (target_accuracy, else pass_accuracy), the cap shared, each retry at retry_lr_factor x
    # the last one's lr; with a retry left an attempt also ends on the stall rule: `stall_steps` steps without a
    # validation gain of `stall_gain`
    attempts: int = _OPTIONAL["attempts"]
    pass_accuracy: float | None = _OPTIONAL["pass_accuracy"]
    stall_steps: int | None = _OPTIONAL["stall_steps"]
    stall_gain: float = _OPTIONAL["stall_gain"]
    retry_lr_factor: float = _OPTIONAL["retry_lr_factor"]  # each retry's lr: the last attempt's times this
    attempt: int = 1  # which attempt this is (vlbind.attempts); from the second on it enters the data RNG
    # the step runs the batch sorted by length, as sub-batches of at most this many positions, each cut to its
    # longest (the same loss with less padding; not in the paper; _step); None: whole. The config has a per-device
    # table (from_section)
    sub_batch_tokens: int | None = None
    # share of the image bank's renderings held out from training for validation
    val_images: float = _OPTIONAL["val_images"]
    seed: int = 0

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"TrainConfig.precision={self.precision!r}; valid: 'fp32', 'bf16'")
        if self.queries not in ("one", "all"):
            raise ValueError(f"TrainConfig.queries={self.queries!r}; valid: 'one', 'all'")
        if self.keep not in ("best", "last"):
            raise ValueError(f"TrainConfig.keep={self.keep!r}; valid: 'best', 'last'")
        if not 0 <= self.plateau_above_chance < 1:
            raise ValueError(f"TrainConfig.plateau_above_chance={self.plateau_above_chance} must lie in [0, 1)")
        if self.binding_loss < 0:
            raise ValueError(f"TrainConfig.binding_loss={self.binding_loss} must be >= 0")
        if not 0 < self.lr_drop_factor < 1:
            raise ValueError(f"TrainConfig.lr_drop_factor={self.lr_drop_factor} must lie in (0, 1)")
        if self.ramp_target is not None and not 0 <= self.ramp_target <= 1:
            raise ValueError(f"TrainConfig.ramp_target={self.ramp_target} must lie in [0, 1] (or be None)")
        if self.pass_accuracy is not None and not 0 <= self.pass_accuracy <= 1:
            raise ValueError(f"TrainConfig.pass_accuracy={self.pass_accuracy} must lie in [0, 1] (or be None)")
        if not 1 <= self.attempt <= self.attempts:
            raise ValueError(f"TrainConfig.attempt={self.attempt} must lie in 1..attempts={self.attempts}")
        if not 0 < self.retry_lr_factor <= 1:
            raise ValueError(f"TrainConfig.retry_lr_factor={self.retry_lr_factor} must lie in (0, 1]")
        if not self.stall_gain > 0:
            raise ValueError(f"TrainConfig.stall_gain={self.stall_gain} must be > 0")
        if not 0 < self.val_images < 1:
            raise ValueError(f"TrainConfig.val_images={self.val_images} must lie in (0, 1)")
        for key in ("batch_size", "eval_every", "val_size", "patience", "checkpoint_every", "sub_batch_tokens",
                    "lr_drop_patience", "attempts", "stall_steps"):
            if (value := getattr(self, key)) is not None and value < 1:  # the last two may be None
                raise ValueError(f"TrainConfig.{key}={value} must be >= 1")
        if self.max_skipped_steps < 0:
            raise ValueError(f"TrainConfig.max_skipped_steps={self.max_skipped_steps} must be >= 0")
        if self.max_steps < 0:
            raise ValueError(f"TrainConfig.max_steps={self.max_steps} must be >= 0 (0: the stage passes its "
                             "starting weights through)")

    @property
    def pass_bar(self) -> float | None:
        """The validation accuracy an attempt must reach to pass (vlbind.attempts): target_accuracy, else
        pass_accuracy; None: the stage cannot fail, so it is never retried."""
        return self.target_accuracy if self.target_accuracy is not None else self.pass_accuracy

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        return from_dict(cls, d)

    @classmethod
    def from_section(cls, train: dict, seed: int, device: str, precision: str) -> TrainConfig:
        """From a (merged) config `train` section (config.stage_train) for a job on `device`, with the autocast
        precision already resolved for it (device.job_device, or precision_for). The section's per-device tables
        give `device`'s entry: `precision` is that resolved one, `sub_batch_tokens` its entry ('cuda:1' -> 'cuda')."""
        sub_batch_tokens = train.get("sub_batch_tokens", {}).get(device.split(":")[0])
        per_device = {"precision": precision, "sub_batch_tokens": sub_batch_tokens}
        return cls.from_dict({**train, "seed": seed, **per_device})


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW (D.2); the fused kernel updates all parameters in one call instead of a loop over tensors, and skips
    a step whose gradient is not finite without a wait on the device (optimizer_step)."""
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def optimizer_step(opt: torch.optim.Optimizer, loss: torch.Tensor, grad_norm: torch.Tensor) -> torch.Tensor:
    """One step of a fused optimizer (make_optimizer), skipped where the step's `loss` or total gradient norm (both
    on the device) is not finite: the weights and the optimizer state, step count included, stay as they were.
    Returns 1.0 where the step was skipped, else 0.0, on the device. It passes `found_inf` as torch.amp.GradScaler
    does (the fused kernels read it); an unfused optimizer refuses it."""
    if not opt.defaults.get("fused"):
        raise ValueError(f"{type(opt).__name__} is not fused: make it with make_optimizer (fused=True), which can "
                         "skip a non-finite step")
    skipped = (~(torch.isfinite(loss.detach()) & torch.isfinite(grad_norm))).float()
    opt.found_inf = skipped
    try:
        opt.step()
    finally:
        del opt.found_inf
    return skipped


def lr_at(step: int, cfg: TrainConfig, scale: float = 1.0) -> float:
    """Linear warm-up over `warmup_steps` (step counted from 1), then constant; times `scale`, the product of the
    plateau's lr drops so far (TrainConfig.lr_drop_patience)."""
    return cfg.lr * scale * min(1.0, step / max(1, cfg.warmup_steps))


def prompt_loss(logits: torch.Tensor, target: np.ndarray) -> torch.Tensor:
    """Cross-entropy, a mean over prompts. logits (B, K, vocab), target (B, K) with -1 where a prompt has no
    label: each prompt's loss is the mean over its labels, so every prompt weighs the same whatever its
    length. For a packed batch the expected gradient is then that of single-query training."""
    target = torch.from_numpy(target).to(logits.device, non_blocking=True)
    has = target >= 0
    losses = F.cross_entropy(logits.flatten(0, 1), target.clamp(min=0).flatten(), reduction="none")
    return ((losses.view_as(target) * has).sum(1) / has.sum(1).clamp(min=1)).mean()


def binding_targets(batch: Batch) -> tuple[np.ndarray, np.ndarray]:
    """(positions, targets), each (B, P): the association items of retrieval prompts and, for each, the
    attribute a query names for its object (its color when the list is keyed by shapes); -1 elsewhere."""
    B, P = batch.colors.shape
    pos = np.full((B, P), -1)
    r, t = np.nonzero((batch.roles == Role.ASSOCIATION_ITEM) & (batch.kind == RETRIEVAL)[:, None])
    pos[r, np.concatenate([np.arange(c) for c in np.bincount(r, minlength=B)])] = t
    slot = batch.slots[np.arange(B)[:, None], np.maximum(pos, 0)]
    named = np.where((batch.query_by == BY_COLOR)[:, None], batch.colors, batch.shapes)
    return pos, np.where(pos >= 0, np.take_along_axis(named, np.maximum(slot, 0), 1), -1)


def training_loss(model: Transformer, batch: Batch, cfg: TrainConfig, device, bank: ImageBank | None = None):
    """The stage's loss on one training batch, single-query or packed: cross-entropy at [ANSWER] (prompt_loss),
    plus `cfg.binding_loss` times the binding loss (binding_targets), from one forward pass."""
    at, target = batch.answer_pos, batch.target
    if at.ndim == 1:
        at, target = at[:, None], target[:, None]
    if not cfg.binding_loss:
        return prompt_loss(answer_logits(model, batch, device, cfg.precision, bank, at=at), target)
    pos, bound = binding_targets(batch)
    logits = answer_logits(model, batch, device, cfg.precision, bank, at=np.concatenate([at, pos], 1))
    Q = at.shape[1]
    return prompt_loss(logits[:, :Q], target) + cfg.binding_loss * prompt_loss(logits[:, Q:], bound)


def validation_set(spec: StageSpec, cfg: TrainConfig, chunk: int = 256, bank: ImageBank | None = None) -> list[Batch]:
    """A fixed validation set of single-query prompts without practice prompts (the stage's own task), drawn from
    its own RNG stream so it never overlaps the training stream's state."""
    rng = np.random.default_rng([cfg.seed, 0xA11D])
    return [generate(spec.without_practice(), s, rng, bank=bank) for s in batch_sizes(cfg.val_size, chunk)]


def chance(batches: list[Batch]) -> float:
    """Validation accuracy of a guess among each prompt's objects: the mean of 1 / objects (outcomes.divergence
    marks a stage whose best validation stays near it)."""
    return float(np.mean(np.concatenate([1 / b.n_objects for b in batches])))


def compiled(model: Transformer, device) -> torch.nn.Module:
    """`model` with its forward compiled by torch.compile: on CUDA in "reduce-overhead" mode (CUDA graphs, one
    per batch shape: the step's kernels replay without the host launching each), elsewhere in the default mode.
    It shares the model's parameters; the weights it trains differ from eager ones by rounding only (test)."""
    return torch.compile(model, mode="reduce-overhead" if str(device).startswith("cuda") else None)


def fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


# the retry rule's settings only say when an attempt stops, never what a step does (as max_steps); the attempt index
# changes the data stream, so a retry's key holds it (a first attempt's key is that of a stage without retries)
RETRY_KEYS = ("attempts", "pass_accuracy", "stall_steps", "stall_gain", "retry_lr_factor", "attempt")


def settings_key(stage: str, spec: StageSpec, cfg: TrainConfig, model: Transformer, parent: str | None,
                 start: tuple[StageSpec, int] | None) -> str:
    """What a stage's saved progress was made with (its resume state, a ramp's lengths, its attempts): a state whose
    key differs is discarded. max_steps and the retry rule only say when to stop, never what a step does, so raising a
    cap or changing the rule keeps a killed run's progress."""
    settings = {k: v for k, v in asdict(cfg).items() if k not in RETRY_KEYS} | {"max_steps": None}
    return fingerprint(stage, spec.to_dict(), settings, model.cfg.to_dict(), parent, _weights_digest(model),
                       *([start[0].to_dict(), start[1]] if start else []), *([cfg.attempt] * (cfg.attempt > 1)))


def train_stage(model: Transformer, spec: StageSpec, cfg: TrainConfig, out_dir: Path, *, stage: str,
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
    `record`: entries the meta adds or replaces (attempts.train_ramped: the ramp's lengths and the whole stage's
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
    progress = _Progress.resume_or_start(out_dir / RESUME_FILE, key, model, opt, rng, stage)
    val_bank = None
    if bank is not None:  # validation shows renderings that training never does
        bank, val_bank = bank.split(cfg.val_images)
    val = validation_set(spec, cfg, bank=val_bank)
    val_chance = chance(val)
    net = compiled(model, device) if cfg.compile else model  # validation stays eager: its shapes differ
    t0, t_last, step_last, losses, skips, reason = time.time(), time.time(), progress.step, [], [], "max_steps"
    while progress.step < cfg.max_steps:
        batch = generate(start_spec if progress.step < start_steps else spec, cfg.batch_size, rng, bank=bank)
        batch = pack_queries(batch) if cfg.queries == "all" else batch
        progress.step += 1
        step = progress.step
        loss, grad_norm, skipped = _step(net, model, opt, batch, cfg, step, device, bank, progress.lr_scale)
        losses.append(loss)
        skips.append(skipped)
        if callback is not None:
            callback(step)
        if step % cfg.eval_every and step != cfg.max_steps:
            continue
        acc = accuracy(model, val, device, cfg.precision, val_bank)
        now = time.time()
        rate = (step - step_last) / max(now - t_last, 1e-9)
        t_last, step_last = now, step
        stop = progress.validate(model, acc, torch.stack(losses), torch.stack(skips), grad_norm, rate, cfg,
                                 val_chance)
        losses, skips = [], []
        _log_validation(stage, spec, cfg, progress, rate, batch)
        if stop is not None:
            reason = stop
            break
        if step % ckpt_every == 0:
            _save_resume(out_dir / RESUME_FILE, key, model, opt, progress.saved(rng, time.time() - t0),
                         progress.best_state)
    if not progress.history:  # max_steps 0: the starting weights pass through; record what they score
        progress.pass_through(accuracy(model, val, device, cfg.precision, val_bank))
        log.info("%s: max_steps 0, weights passed through unchanged; val_acc %.4f", stage, progress.best_acc)
    what = {"stage": stage, "parent": parent, "stage_spec": spec.to_dict(), "train_config": asdict(cfg),
            "start": None if start is None else {"stage_spec": start_spec.to_dict(), "steps": start_steps},
            "model_config": model.cfg.to_dict()}
    how = {"stopped_because": reason, "val_chance": val_chance, "skipped_steps": progress.skipped,
           "resumed": progress.resumed, "wall_seconds": progress.wall_before + time.time() - t0,
           "vlbind_version": __version__}
    return _finish(model, progress, cfg, what, how | (record or {}), out_dir)


def _step(net, model: Transformer, opt, batch: Batch, cfg: TrainConfig, step: int, device, bank,
          lr_scale: float = 1.0):
    """One optimizer step (the `step`-th) on `batch`: the loss through `net` (the model, or its compiled forward),
    where `cfg.sub_batch_tokens` is set on length-sorted sub-batches of at most that many positions (the batch's
    loss, a mean over its prompts, with little padding: tasks.by_length), gradients clipped, the learning rate of
    `step` times `lr_scale` (the plateau's lr drops), non-finite steps skipped (optimizer_step). Returns the loss,
    the gradient norm and whether the step was skipped, all left on the device."""
    parts = by_length(batch, cfg.sub_batch_tokens) if cfg.sub_batch_tokens else [batch]
    loss = sum(training_loss(net, part, cfg, device, bank) * (len(part) / len(batch)) for part in parts)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    for g in opt.param_groups:
        g["lr"] = lr_at(step, cfg, lr_scale)
    return loss.detach(), grad_norm, optimizer_step(opt, loss, grad_norm)


def _log_validation(stage: str, spec: StageSpec, cfg: TrainConfig, progress: _Progress, rate: float,
                    batch: Batch) -> None:
    h = progress.history[-1]
    log.info("%s step %d/%d objects %d..%d loss %.4f val_acc %.4f best %.4f@%d skipped %d | %.1f steps/s, "
             "%.0f tok/s, ETA to cap %s", stage, h["step"], cfg.max_steps, spec.min_objects, spec.max_objects,
             h["train_loss"], h["val_accuracy"], progress.best_acc, progress.best_step, progress.skipped, rate,
             rate * int((batch.roles != Role.PAD).sum()), _eta((cfg.max_steps - h["step"]) / max(rate, 1e-9)))
    if progress.last_drop == h["step"] and h["step"]:
        log.info("%s step %d: no gain in %d validations, lr x %g from here (%.2e)", stage, h["step"],
                 cfg.lr_drop_patience, cfg.lr_drop_factor, cfg.lr * progress.lr_scale)


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
    lr_scale: float = 1.0  # the product of the lr drops so far (TrainConfig.lr_drop_patience)
    last_drop: int = 0  # the step of the last lr drop
    gain_acc: float = -1.0  # the stall rule's reference: the validation of the last gain of stall_gain ...
    gain_step: int = 0  # ... and its step (TrainConfig.stall_steps)

    @classmethod
    def resume_or_start(cls, path: Path, key: str, model, opt, rng: np.random.Generator, stage: str) -> _Progress:
        """From a saved state made with the same settings (loading the model, the optimizer and `rng` from it), or
        fresh: nothing done, the starting weights the best so far."""
        resumed = _load_resume(path, key, model, opt)
        if resumed is None:
            return cls(best_state={k: v.detach().clone() for k, v in model.state_dict().items()})
        saved, best_state = resumed
        rng.bit_generator.state = saved["rng_state"]
        log.info("resumed %s from step %d (best val acc %.4f)", stage, saved["step"], saved["best_acc"])
        return cls(best_state=best_state, step=saved["step"], best_acc=saved["best_acc"],
                   best_step=saved["best_step"], history=saved["history"],
                   wall_before=saved.get("wall_seconds", 0.0), resumed=True, lr_scale=saved.get("lr_scale", 1.0),
                   last_drop=saved.get("last_drop", 0), gain_acc=saved.get("gain_acc", -1.0),
                   gain_step=saved.get("gain_step", 0))

    @property
    def skipped(self) -> int:
        """Steps of the stage skipped so far (a non-finite loss or gradient)."""
        return sum(row.get("skipped_steps", 0) for row in self.history)

    def validate(self, model, acc: float, losses: torch.Tensor, skips: torch.Tensor, grad_norm: torch.Tensor,
                 rate: float, cfg: TrainConfig, val_chance: float) -> str | None:
        """Record a validation (its accuracy `acc`, the training `losses` and which steps were skipped, `skips`,
        since the last one) and keep the weights if they are the best; return why the stage stops here, or None:
        more than max_skipped_steps skipped steps in the stage (the row's `finite` is then False), the target
        accuracy, an attempt's stall (STALLED: with a retry left and below its pass bar, no gain of stall_gain for
        stall_steps steps; vlbind.attempts), or a plateau (no gain of min_delta for `patience` validations, once
        validation has left chance by plateau_above_chance); before that, with lr_drop_patience, it lowers the lr
        (`lr_scale`) each time validation has not gained for that many validations since the best or the last drop.
        `train_loss` is the mean over the steps that were not skipped."""
        trained, skipped = losses.double(), skips.bool()  # the one wait on the device between validations
        kept = trained[~skipped & torch.isfinite(trained)]
        self.history.append({"step": self.step, "train_loss": float(kept.mean()) if len(kept) else float("nan"),
                             "val_accuracy": acc, "lr": lr_at(self.step, cfg, self.lr_scale),
                             "grad_norm": float(grad_norm), "steps_per_s": rate, "skipped_steps": int(skipped.sum())})
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
        if cfg.stall_steps is not None and cfg.attempt < cfg.attempts and cfg.pass_bar is not None \
                and self.best_acc < cfg.pass_bar and self.step - self.gain_step >= cfg.stall_steps:
            return STALLED
        learning = not cfg.plateau_above_chance or self.best_acc >= val_chance + cfg.plateau_above_chance
        if (self.step - self.best_step) >= cfg.patience * cfg.eval_every and learning:
            return "plateau"
        waited = self.step - max(self.best_step, self.last_drop)
        if cfg.lr_drop_patience is not None and waited >= cfg.lr_drop_patience * cfg.eval_every and learning:
            self.lr_scale, self.last_drop = self.lr_scale * cfg.lr_drop_factor, self.step
        return None

    def pass_through(self, acc: float) -> None:
        """A stage of max_steps 0: the starting weights, validated once, are the stage's."""
        self.best_acc = acc
        self.history.append({"step": 0, "train_loss": float("nan"), "val_accuracy": acc, "lr": 0.0,
                             "grad_norm": float("nan"), "steps_per_s": float("nan"), "skipped_steps": 0,
                             "finite": True})

    def saved(self, rng: np.random.Generator, seconds: float) -> dict:
        """What a resume state records besides tensors (JSON metadata)."""
        return {"step": self.step, "best_acc": self.best_acc, "best_step": self.best_step, "history": self.history,
                "rng_state": rng.bit_generator.state, "wall_seconds": self.wall_before + seconds,
                "lr_scale": self.lr_scale, "last_drop": self.last_drop, "gain_acc": self.gain_acc,
                "gain_step": self.gain_step}


def _finish(model: Transformer, progress: _Progress, cfg: TrainConfig, what: dict, how: dict, out_dir: Path) -> dict:
    """Keep the weights `cfg.keep` says (the best validation's or the last step's; after too many skipped steps, the
    best finite validation's, or the starting weights where there was none: best step 0, best accuracy NaN),
    write the stage's model directory (weights; meta: `what` was trained, the steps and accuracies, `how` it
    ended; curve), drop its resume state; return the meta."""
    last = cfg.keep == "last" and how["stopped_because"] != NON_FINITE
    if not last:
        model.load_state_dict(progress.best_state)
    best_acc = progress.best_acc if progress.best_acc >= 0 else float("nan")  # -1: no finite validation
    kept = progress.history[-1] if last else {"step": progress.best_step, "val_accuracy": best_acc}
    meta = {**what, "steps": progress.step, "best_step": progress.best_step, "best_val_accuracy": best_acc,
            "kept_step": kept["step"], "kept_val_accuracy": kept["val_accuracy"], **how}
    save_model(out_dir, model, meta, pd.DataFrame(progress.history).assign(attempt=cfg.attempt))
    (out_dir / RESUME_FILE).unlink(missing_ok=True)
    log.info("%s done: %s after %d steps, best val acc %.4f at step %d; kept the weights of step %d (%s)",
             meta["stage"], meta["stopped_because"], progress.step, best_acc, progress.best_step, kept["step"],
             "last" if last else "best")
    return meta


def _weights_digest(model: Transformer) -> str:
    """Identify the starting weights, so a resume state from another parent is never used."""
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()[:16]


def _save_resume(path, key, model, opt, progress: dict, best_state: dict) -> None:
    """Weights, best weights and optimizer state as tensors; `progress` (step, best accuracy and step,
    curve, data RNG state, wall time) and the settings key as JSON metadata."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors |= {f"best.{k}": v for k, v in best_state.items()}
    opt_tensors, groups = optimizer_tensors(opt)
    tensors |= opt_tensors
    save_tensors(path, tensors, {**progress, "key": key, "param_groups": groups})


def _prefixed(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def resume_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The current weights in a running (or killed) stage's resume state, `model.load_state_dict`-ready:
    to look at a stage while it trains."""
    return _prefixed(load_tensors(path)[0], "model.")


def _load_resume(path: Path, key: str, model, opt) -> tuple[dict, dict] | None:
    """(progress, best weights) of a saved state made with the same settings, loading model and optimizer."""
    if not path.is_file():
        return None
    try:
        if read_metadata(path).get("key") != key:
            log.warning("ignoring %s: it was saved with other settings or starting weights", path)
            return None
        tensors, meta = load_tensors(path)
    except CorruptFileError as e:  # never let a damaged state block a rerun: keep it aside, start afresh
        aside = path.with_name(path.name + ".corrupt")
        os.replace(path, aside)
        log.warning("%s\nmoved it to %s; training this stage from its start", e, aside)
        return None
    model.load_state_dict(_prefixed(tensors, "model."))
    load_optimizer_tensors(opt, {k: v for k, v in tensors.items() if k.startswith("optim.")}, meta["param_groups"])
    return meta, _prefixed(tensors, "best.")


def _eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"

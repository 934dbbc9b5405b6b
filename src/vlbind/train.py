"""One training stage (appendix D.2): AdamW without weight decay, gradient clipping, linear warm-up then a
constant learning rate, cross-entropy on the [ANSWER] token only, validation every `eval_every` steps and
early stopping.

A stage stops at the first of: validation accuracy reaching `target_accuracy` (the curriculum's advance
criterion), a plateau (no gain of `min_delta` over the best for `patience` validations), or `max_steps`.
The weights kept are those of the best validation. Training state (weights, optimizer, data RNG, curve)
is saved atomically every `checkpoint_every` steps and a killed run resumes from it and reaches the same
weights as an uninterrupted one; a saved state whose settings differ is discarded, not resumed (a raised
`max_steps` is not a difference: kill a stage, raise its cap, and it resumes).

Length ramp (`ramp_target`, off by default; not in the paper): the stage starts on prompts of `min_pairs`
objects and lets the longest prompt grow by one object each time validation accuracy on the current range
reaches `ramp_target`, until the stage's `max_pairs`. Validation always uses the current range; the stop
rules above judge the full range only (a plateau before it stops the stage there), and `max_steps` caps
the whole stage. A small model on CPU gets through 2..8 objects this way where "all lengths at once" sits
at chance (docs/results/mini/).

Learning-rate decay on a stall (`lr_decay`, off by default; not in the paper, whose rate is constant after
warm-up): after `lr_patience` validations without a new best, the rate is multiplied by `lr_decay`, never
below `min_lr`; when the length ramp adds an object it returns to `lr`. A mini model sitting just under a
ramp target at lr 1e-3 passed it within 1.5k steps at 1e-4, while a rate left low learnt the next lengths
slower; even with the return to `lr`, mini's text_s4 did not get further than at a constant rate, so mini
leaves it off (docs/results/mini/).

Restarts (`restarts`, 0 by default; not in the paper): a stage whose length ramp stops on a plateau before
its full range starts over from its parent's weights, with a fresh optimizer and warm-up and another data
stream (attempt k draws its prompts from the seed, the stage and k), up to `restarts` times; `max_steps`
caps each attempt. The weights kept are those of the attempt that got furthest (longest range, then best
validation accuracy); metrics.parquet holds every attempt's curve (`attempt`, `kept`), meta.json a summary
of each. A mini model that stalls on a short range in one trajectory passes it in another from the same
parent (docs/results/mini/).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from . import __version__
from .checkpoint import load_optimizer_tensors, load_tensors, optimizer_tensors, save_model, save_tensors
from .model import Transformer
from .settings import from_dict
from .tasks import Batch, StageSpec, batch_sizes, generate

if TYPE_CHECKING:
    from .bank import ImageBank

log = logging.getLogger(__name__)
RESUME_FILE = "resume.safetensors"


@dataclass(frozen=True)
class TrainConfig:
    lr: float = 1e-3  # lost from the paper's text; our assumption
    warmup_steps: int = 2000
    batch_size: int = 32
    grad_clip: float = 1.0
    weight_decay: float = 0.0
    eval_every: int = 250
    val_size: int = 1024
    target_accuracy: float | None = 0.99  # None: train until plateau or max_steps
    patience: int = 20
    min_delta: float = 0.001
    max_steps: int = 100_000
    checkpoint_every: int = 1000  # rounded up to a multiple of eval_every
    precision: str = "fp32"  # "fp32" or "bf16" (autocast)
    ramp_target: float | None = None  # length ramp (see module doc); None: all lengths from the start
    lr_decay: float | None = None  # lr factor on a stall (see module doc); None: constant after warm-up
    lr_patience: int = 10  # validations without a new best before the lr decays
    min_lr: float = 0.0
    restarts: int = 0  # fresh starts after a plateau on a short ramp range (see module doc)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.precision not in ("fp32", "bf16"):
            raise ValueError(f"TrainConfig.precision={self.precision!r}; valid: 'fp32', 'bf16'")
        if self.lr_decay is not None and not 0 < self.lr_decay < 1:
            raise ValueError(f"TrainConfig.lr_decay={self.lr_decay} must be in (0, 1) or None")
        for key in ("batch_size", "eval_every", "val_size", "max_steps", "patience", "checkpoint_every",
                    "lr_patience"):
            if getattr(self, key) < 1:
                raise ValueError(f"TrainConfig.{key}={getattr(self, key)} must be >= 1")
        if self.restarts < 0:
            raise ValueError(f"TrainConfig.restarts={self.restarts} must be >= 0")

    @classmethod
    def from_dict(cls, d: dict) -> TrainConfig:
        return from_dict(cls, d)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW (D.2); the fused kernel updates all parameters in one call instead of a loop over tensors."""
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over `warmup_steps` (step counted from 1), then constant."""
    return cfg.lr * min(1.0, step / max(1, cfg.warmup_steps))


def model_inputs(batch: Batch, device, bank: ImageBank | None = None):
    """(tokens, positions, images) tensors for Transformer.residual; image features are read from `bank`."""
    tokens = torch.from_numpy(batch.tokens).to(device, non_blocking=True)
    positions = torch.from_numpy(batch.positions).to(device, non_blocking=True)
    images = None
    mask = batch.image_ids >= 0
    if mask.any():
        if bank is None:
            raise ValueError("the batch holds image-context prompts but no image bank was given")
        features = torch.from_numpy(bank.gather(batch.image_ids[mask], batch.patches[mask]))
        images = (torch.from_numpy(mask).to(device), features.to(device, non_blocking=True))
    return tokens, positions, images


def answer_logits(model: Transformer, batch: Batch, device, precision: str = "fp32",
                  bank: ImageBank | None = None) -> torch.Tensor:
    """Logits at each prompt's [ANSWER] position, (B, vocab), float32. The last block and the unembedding
    run at those positions only."""
    tokens, positions, images = model_inputs(batch, device, bank)
    with autocast(device, precision):
        at = torch.from_numpy(batch.answer_pos).to(tokens.device)
        logits = model.logits(model.residual(tokens, positions, images, at=at))
    return logits.float()


def autocast(device, precision: str):
    device_type = torch.device(device).type
    return torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "bf16")


@torch.no_grad()
def count_correct(model: Transformer, batches: Iterable[Batch], device, precision: str = "fp32",
                  bank: ImageBank | None = None) -> tuple[int, int]:
    """(argmax at [ANSWER] == target, prompts) over `batches`, in eval mode; the model's mode is restored."""
    was_training = model.training
    model.eval()
    hits = total = 0
    try:
        for b in batches:
            pred = answer_logits(model, b, device, precision, bank).argmax(-1).cpu().numpy()
            hits += int((pred == b.target).sum())
            total += len(b)
    finally:
        model.train(was_training)
    return hits, total


def accuracy(model: Transformer, batches: Iterable[Batch], device, precision: str = "fp32",
             bank: ImageBank | None = None) -> float:
    hits, total = count_correct(model, batches, device, precision, bank)
    return hits / total


def validation_set(spec: StageSpec, cfg: TrainConfig, chunk: int = 256, bank: ImageBank | None = None) -> list[Batch]:
    """A fixed validation set, drawn from its own RNG stream so it never overlaps the training stream's state.
    One-hop practice prompts and the extra share of longest prompts (StageSpec.hop_fraction, longest_fraction)
    shape training only: validation leaves them out and judges retrieval on lengths drawn uniformly."""
    spec = replace(spec, hop_fraction=0.0, longest_fraction=0.0)
    rng = np.random.default_rng([cfg.seed, 0xA11D])
    return [generate(spec, s, rng, bank=bank) for s in batch_sizes(cfg.val_size, chunk)]


def fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def data_stream(seed: int, stage: str, attempt: int = 0) -> np.random.Generator:
    """The RNG that draws `stage`'s training prompts in its `attempt` (0: the first run, k: the k-th restart)."""
    entropy = [seed, int(fingerprint(stage), 16) % (2**32)]
    return np.random.default_rng(entropy + [attempt] if attempt else entropy)


@dataclass
class Progress:
    """Where one attempt of a stage stands; saved in the resume file (with the data RNG state)."""
    longest: int  # the longest prompt of the current ramp range
    attempt: int = 0
    step: int = 0
    best_acc: float = -1.0
    best_step: int = 0
    lr_scale: float = 1.0  # lr decay on a stall: the current factor
    decayed_at: int = 0  # step of the last decay (or of the last added object)
    history: list = field(default_factory=list)  # validation rows of every attempt so far
    finished: list = field(default_factory=list)  # summaries of the earlier attempts
    wall_seconds: float = 0.0  # spent in earlier processes

    def summary(self, reason: str) -> dict:
        return {"attempt": self.attempt, "steps": self.step, "best_step": self.best_step,
                "best_val_accuracy": self.best_acc, "max_pairs_reached": self.longest, "stopped_because": reason}


def train_stage(model: Transformer, spec: StageSpec, cfg: TrainConfig, out_dir: Path, *, stage: str,
                device="cpu", parent: str | None = None, bank: ImageBank | None = None,
                callback: Callable[[int], None] | None = None) -> dict:
    """Train `model` in place on prompts from `spec` (image contexts read from `bank`); write the stage's
    model directory; return its meta.

    `callback(step)` runs after every optimizer step (tests use it to simulate a kill or inject a NaN).
    """
    out_dir = Path(out_dir)
    model.to(device).train()
    # max_steps only says when to stop, never what a step does: raising a cap keeps a killed run's progress
    key = fingerprint(stage, spec.to_dict(), {**asdict(cfg), "max_steps": None}, model.cfg.to_dict(), parent,
                      _weights_digest(model))
    ckpt_every = math.ceil(cfg.checkpoint_every / cfg.eval_every) * cfg.eval_every
    first = spec.max_pairs if cfg.ramp_target is None else spec.min_pairs
    start = _clone(model.state_dict())
    opt = make_optimizer(model, cfg)
    p, rng, best_state, kept = Progress(longest=first), data_stream(cfg.seed, stage), start, None
    resumed = _load_resume(out_dir / RESUME_FILE, key, model, opt)
    if resumed is not None:
        p, rng_state, best_state, kept = resumed
        rng = data_stream(cfg.seed, stage, p.attempt)
        rng.bit_generator.state = rng_state
        log.info("resumed %s from step %d of attempt %d (best val acc %.4f)", stage, p.step, p.attempt, p.best_acc)
    current = replace(spec, max_pairs=p.longest)
    val = validation_set(current, cfg, bank=bank)

    t0 = time.time()
    while True:  # one attempt per pass; a restart starts the next from the parent's weights
        t_last, step_last, losses, reason = time.time(), p.step, [], "max_steps"
        while p.step < cfg.max_steps:
            batch = generate(current, cfg.batch_size, rng, bank=bank)
            logits = answer_logits(model, batch, device, cfg.precision, bank)
            loss = F.cross_entropy(logits, torch.from_numpy(batch.target).to(logits.device))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip))
            p.step += 1
            for g in opt.param_groups:
                g["lr"] = lr_at(p.step, cfg) * p.lr_scale
            opt.step()
            losses.append(loss.item())
            if callback is not None:
                callback(p.step)
            if p.step % cfg.eval_every and p.step != cfg.max_steps:
                continue
            acc = accuracy(model, val, device, cfg.precision, bank)
            now = time.time()
            rate = (p.step - step_last) / max(now - t_last, 1e-9)
            t_last, step_last = now, p.step
            p.history.append({"attempt": p.attempt, "step": p.step, "train_loss": float(np.mean(losses)),
                              "val_accuracy": acc, "lr": lr_at(p.step, cfg) * p.lr_scale, "grad_norm": grad_norm,
                              "steps_per_s": rate, "finite": bool(np.isfinite(losses).all()),
                              "max_pairs": p.longest})
            losses = []
            if acc >= p.best_acc + cfg.min_delta or p.best_acc < 0:
                p.best_acc, p.best_step = acc, p.step
                best_state = _clone(model.state_dict())
            log.info("%s step %d/%d objects %d..%d loss %.4f val_acc %.4f best %.4f@%d | %.1f steps/s, %.0f tok/s, "
                     "ETA to cap %s", stage, p.step, cfg.max_steps, spec.min_pairs, p.longest,
                     p.history[-1]["train_loss"], acc, p.best_acc, p.best_step, rate,
                     rate * cfg.batch_size * batch.tokens.shape[1], _eta((cfg.max_steps - p.step) / max(rate, 1e-9)))
            if not p.history[-1]["finite"]:
                reason = "non_finite_loss"
                break
            if p.longest < spec.max_pairs:
                if acc >= cfg.ramp_target:
                    p.longest += 1
                    current = replace(spec, max_pairs=p.longest)
                    val = validation_set(current, cfg, bank=bank)
                    p.best_acc, p.best_step = -1.0, p.step  # from here on the best is judged on the longer range
                    p.lr_scale, p.decayed_at = 1.0, p.step  # a new length is learnt at the full rate
                    log.info("%s step %d: ramp to %d..%d objects", stage, p.step, spec.min_pairs, p.longest)
            elif cfg.target_accuracy is not None and acc >= cfg.target_accuracy:
                reason = "target_accuracy"
                break
            if (p.step - p.best_step) >= cfg.patience * cfg.eval_every:
                reason = "plateau"
                break
            floor = cfg.min_lr / cfg.lr
            if (cfg.lr_decay is not None and p.lr_scale > floor
                    and p.step - max(p.best_step, p.decayed_at) >= cfg.lr_patience * cfg.eval_every):
                p.lr_scale, p.decayed_at = max(p.lr_scale * cfg.lr_decay, floor), p.step
                log.info("%s step %d: no new best in %d validations, lr -> %.2e", stage, p.step, cfg.lr_patience,
                         cfg.lr * p.lr_scale)
            if p.step % ckpt_every == 0:
                saved = replace(p, wall_seconds=p.wall_seconds + time.time() - t0)
                _save_resume(out_dir / RESUME_FILE, key, model, opt, saved, rng, best_state, kept)

        summary = p.summary(reason)
        if kept is None or (p.longest, p.best_acc) > (kept[0]["max_pairs_reached"], kept[0]["best_val_accuracy"]):
            kept = (summary, best_state)
        if not (reason == "plateau" and p.longest < spec.max_pairs and p.attempt < cfg.restarts):
            break
        log.info("%s: plateau on %d..%d objects in attempt %d; restart %d of %d from the parent's weights with "
                 "another data stream", stage, spec.min_pairs, p.longest, p.attempt, p.attempt + 1, cfg.restarts)
        p = Progress(longest=first, attempt=p.attempt + 1, history=p.history, finished=[*p.finished, summary],
                     wall_seconds=p.wall_seconds)
        model.load_state_dict(start)
        opt, rng, best_state = make_optimizer(model, cfg), data_stream(cfg.seed, stage, p.attempt), start
        current = replace(spec, max_pairs=p.longest)
        val = validation_set(current, cfg, bank=bank)

    summary, best_state = kept
    model.load_state_dict(best_state)
    history = pd.DataFrame(p.history)
    history["kept"] = history["attempt"] == summary["attempt"]
    meta = {"stage": stage, "parent": parent, "stage_spec": spec.to_dict(), "train_config": asdict(cfg),
            "model_config": model.cfg.to_dict(), **summary, "attempts": [*p.finished, p.summary(reason)],
            "resumed": resumed is not None, "wall_seconds": p.wall_seconds + time.time() - t0,
            "vlbind_version": __version__}
    save_model(out_dir, model, meta, history)
    (out_dir / RESUME_FILE).unlink(missing_ok=True)
    log.info("%s done: %s after %d steps, best val acc %.4f at step %d%s", stage, summary["stopped_because"],
             summary["steps"], summary["best_val_accuracy"], summary["best_step"],
             f" (attempt {summary['attempt']} of {p.attempt + 1})" if p.attempt else "")
    return meta


def _clone(state: dict) -> dict:
    return {k: v.detach().clone() for k, v in state.items()}


def _weights_digest(model: Transformer) -> str:
    """Identify the starting weights, so a resume state from another parent is never used."""
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()[:16]


def _save_resume(path, key, model, opt, progress: Progress, rng, best_state: dict,
                 kept: tuple[dict, dict] | None) -> None:
    """Weights, best weights, optimizer state and (after a restart) the furthest earlier attempt's summary and
    weights as tensors; progress, the data RNG state and the settings key as JSON metadata."""
    tensors = {f"model.{k}": v for k, v in model.state_dict().items()}
    tensors |= {f"best.{k}": v for k, v in best_state.items()}
    if kept is not None:
        tensors |= {f"kept.{k}": v for k, v in kept[1].items()}
    opt_tensors, groups = optimizer_tensors(opt)
    tensors |= opt_tensors
    save_tensors(path, tensors, {**asdict(progress), "rng_state": rng.bit_generator.state, "key": key,
                                 "param_groups": groups, "kept": kept[0] if kept else None})


def _load_resume(path: Path, key: str, model, opt) -> tuple[Progress, dict, dict, tuple | None] | None:
    """(progress, data RNG state, best weights, furthest earlier attempt) of a saved state made with the same
    settings, loading model and optimizer."""
    if not path.is_file():
        return None
    tensors, meta = load_tensors(path)
    if meta.get("key") != key:
        log.warning("ignoring %s: it was saved with other settings or starting weights", path)
        return None
    pick = lambda prefix: {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
    model.load_state_dict(pick("model."))
    load_optimizer_tensors(opt, {k: v for k, v in tensors.items() if k.startswith("optim.")}, meta["param_groups"])
    progress = Progress(**{f.name: meta[f.name] for f in fields(Progress) if f.name in meta})
    kept = (meta["kept"], pick("kept.")) if meta.get("kept") else None
    return progress, meta["rng_state"], pick("best."), kept


def _eta(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m{seconds % 60:02d}s"

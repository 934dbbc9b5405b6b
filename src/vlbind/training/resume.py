"""A stage's resume state and what identifies it: the settings key a saved state is made with (`settings_key`:
the stage's task, training settings, model, parent, starting weights), the atomic save of weights, best weights,
optimizer and progress (`save_resume`, every `checkpoint_every` steps, and at a stop: `StopSignal`) and the load that
refuses a state made with other settings or starting weights and moves a damaged one aside (`load_resume`).
vlbind.training.loop resumes from it; vlbind.training.attempts keys a ramp's lengths and a unit's attempts with the same
key.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import threading
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from vlbind.core.files import CorruptFileError
from vlbind.model.checkpoint import load_optimizer_tensors, load_tensors, optimizer_tensors, read_metadata, save_tensors
from vlbind.training.config import TrainConfig

if TYPE_CHECKING:
    from vlbind.data.spec import StageSpec
    from vlbind.model.transformer import Transformer

log = logging.getLogger(__name__)
RESUME_FILE = "resume.safetensors"


def fingerprint(*parts) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


# the retry rule's settings only say when an attempt stops, never what a step does (as max_steps); the attempt index
# changes the data stream, so a retry's key holds it (a first attempt's key is that of a stage without retries)
RETRY_KEYS = ("attempts", "pass_accuracy", "stall_steps", "stall_gain", "stall_margin", "retry_lr_factor", "attempt")


def settings_key(stage: str, spec: StageSpec, cfg: TrainConfig, model: Transformer, parent: str | None,
                 start: tuple[StageSpec, int] | None) -> str:
    """What a stage's saved progress was made with (its resume state, a ramp's lengths, its attempts): a state whose
    key differs is discarded. max_steps and the retry rule only say when to stop, never what a step does, so raising a
    cap or changing the rule keeps a killed run's progress."""
    settings = {k: v for k, v in asdict(cfg).items() if k not in RETRY_KEYS} | {"max_steps": None}
    return fingerprint(stage, spec.to_dict(), settings, model.cfg.to_dict(), parent, weights_digest(model),
                       *([start[0].to_dict(), start[1]] if start else []), *([cfg.attempt] * (cfg.attempt > 1)))


def weights_digest(model: Transformer) -> str:
    """Identify the starting weights, so a resume state from another parent is never used."""
    h = hashlib.sha256()
    for v in model.state_dict().values():
        h.update(v.detach().cpu().float().numpy().tobytes())
    return h.hexdigest()[:16]


class StopSignal:
    """Inside `with`, SIGTERM (a scheduler's stop: Snakemake's, SLURM's at a job's time limit, `kill`) sets `received`
    instead of ending the process, so that a training loop can end its step, save its resume state and exit
    (training.loop) rather than lose the steps since its last save; the handler it replaced is restored on leaving.
    A signal handler can only be set in the main thread: elsewhere SIGTERM keeps its handler."""

    def __init__(self) -> None:
        self.received = False
        self._replaced = None

    def __enter__(self) -> StopSignal:
        if threading.current_thread() is threading.main_thread():
            self._replaced = signal.signal(signal.SIGTERM, self._receive)
        return self

    def _receive(self, signum, frame) -> None:
        self.received = True

    def __exit__(self, *exc) -> None:
        if self._replaced is not None:
            signal.signal(signal.SIGTERM, self._replaced)


def save_resume(path, key, model, opt, progress: dict, best_state: dict) -> None:
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


def load_resume(path: Path, key: str, model, opt) -> tuple[dict, dict] | None:
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

"""The optimizer of every training step (appendix D.2): AdamW, fused, skipping a step whose loss or gradient is not
finite without a wait on the device; the learning rate's linear warm-up, then constant."""

from __future__ import annotations

import torch

from vlbind.training.config import TrainConfig


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW (D.2) at torch's betas (0.9, 0.999) and eps ([assumption]: the paper states neither), fresh at every
    stage, ramp length and retry, as the warm-up is ([assumption]: the paper states one schedule, not when it
    restarts); the fused kernel updates all parameters in one call instead of a loop over tensors, and skips a step
    whose gradient is not finite without a wait on the device (optimizer_step)."""
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


def lr_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up over `warmup_steps` (step counted from 1), then constant."""
    return cfg.lr * min(1.0, step / max(1, cfg.warmup_steps))

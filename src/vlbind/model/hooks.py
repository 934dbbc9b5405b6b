"""Hook points and the hooks analyses attach to them, as in TransformerLens (`hook_points.py` there).

A model's hook points are identity modules named by module path (vlbind.model.transformer's are
    blocks.{i}.hook_resid_pre, blocks.{i}.hook_resid_mid, blocks.{i}.hook_resid_post,
    blocks.{i}.hook_attn_out, blocks.{i}.hook_mlp_out,
    blocks.{i}.attn.hook_k, blocks.{i}.attn.hook_v (keys after RoPE, values: (B, heads, T, d_head)),
    blocks.{i}.attn.hook_attn_scores (pre-softmax, causal mask applied: where knockouts belong),
    blocks.{i}.attn.hook_pattern (post-softmax)).
A hook is `fn(tensor, name) -> tensor | None` (None keeps the tensor). Attach hooks only through
`with model.hooks([(name, fn), ...]):` (`attached`), which removes them on exit, exceptions and nesting included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import contextmanager

import torch
import torch.nn as nn

HookFn = Callable[[torch.Tensor, str], "torch.Tensor | None"]


class HookPoint(nn.Module):
    """Identity that runs attached hook functions in order."""

    def __init__(self) -> None:
        super().__init__()
        self.fns: list[HookFn] = []
        self.name = ""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for fn in self.fns:
            out = fn(x, self.name)
            if out is not None:
                x = out
        return x


def hook_points(module: nn.Module) -> dict[str, HookPoint]:
    """Every HookPoint of `module`, by module path."""
    return {name: m for name, m in module.named_modules() if isinstance(m, HookPoint)}


@contextmanager
def attached(module: nn.Module, fwd: Iterable[tuple[str, HookFn]]):
    """Attach hooks by name for the duration of the block; always detached afterwards."""
    points = hook_points(module)
    done: list[tuple[HookPoint, HookFn]] = []
    try:
        for name, fn in fwd:
            if name not in points:
                raise KeyError(f"no hook point {name!r}; e.g. {sorted(points)[:3]} ... ({len(points)} in all)")
            points[name].fns.append(fn)
            done.append((points[name], fn))
        yield module
    finally:
        for point, fn in reversed(done):
            point.fns.remove(fn)


# hook names, and the hook builders the analyses use

def hook_name(layer: int, point: str) -> str:
    """The name of hook point `point` of block `layer`: hook_name(3, "attn.hook_k") == "blocks.3.attn.hook_k"."""
    return f"blocks.{layer}.{point}"


def resid_name(layer: int, n_layers: int) -> str:
    """The residual stream entering block `layer`; layer == n_layers names the stream after the last block."""
    return hook_name(layer, "hook_resid_pre") if layer < n_layers else hook_name(n_layers - 1, "hook_resid_post")


def cache_hook(store: dict) -> HookFn:
    """A hook that records its tensor under its name (read access)."""
    def fn(x, name):
        store[name] = x.detach()
    return fn


def patch_hook(rows: torch.Tensor, positions: torch.Tensor, values: torch.Tensor) -> HookFn:
    """Replace x[rows[i], positions[i]] by values[i]; for residual-stream hooks, x is (B, T, d)."""
    def fn(x, name):
        x = x.clone()
        x[rows, positions] = values.to(x.dtype)
        return x
    return fn


def knockout_hook(blocked: torch.Tensor) -> HookFn:
    """Forbid attention where blocked (B, T, T) [query, key] is True, in every head (attn_scores hooks)."""
    def fn(scores, name):
        return scores.masked_fill(blocked[:, None], float("-inf"))
    return fn


def skip_block_hooks(layer: int) -> list[tuple[str, HookFn]]:
    """Bypass block `layer`: its output residual stream is its input."""
    saved = {}

    def keep(x, name):
        saved["x"] = x

    def restore(x, name):
        return saved.pop("x")
    return [(hook_name(layer, "hook_resid_pre"), keep), (hook_name(layer, "hook_resid_post"), restore)]

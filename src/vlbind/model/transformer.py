"""The paper's small decoder-only transformer (appendix D.1, Table 2) with a hook API for analyses.

Design ([assumption]: the paper states the sizes, not these): pre-norm blocks (LayerNorm -> causal self-attention ->
residual add; LayerNorm -> GELU MLP -> residual add), no biases in linear layers, no dropout, untied input and output
embeddings. RoPE is applied
to queries and keys, rotating interleaved (even, odd) dimension pairs; its position ids are an input, so
unattendable noise can be realised as jumps in them (see data/tasks.py). Attention uses
`scaled_dot_product_attention` unless a hook needs the scores or the pattern. On CPU, attention itself
(scores, softmax, weighted values) runs in float32 even under bf16 autocast, while the linear layers run in
bf16: PyTorch's CPU flash-attention backward is ~10x slower in bf16 than in float32 at these shapes, and
bf16 matrix multiplies are ~4x faster than float32 ones on a CPU with AVX512-BF16 (benchmarks/). On CUDA
attention runs in the autocast dtype.

Its hook points (vlbind.model.hooks) are named by module path, as in TransformerLens; `with model.hooks([(name, fn)]):`
attaches hooks for a block. `extend` (the attention's `past` branch) runs new tokens against a cached key/value
prefix: the interchange sweep's fast path (interp/interchange.py), tested against full forward passes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from contextlib import nullcontext
from dataclasses import asdict, dataclass, replace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from vlbind.core.settings import config_defaults
from vlbind.model.hooks import HookFn, HookPoint, attached, cache_hook, hook_points

# The kernels `scaled_dot_product_attention` may choose from, in PyTorch's order, cuDNN left out. On H100/H200
# since torch 2.11 cuDNN is the default for an explicit `attn_mask`, and its backward returns NaN in grad_q when the
# key length is 64 mod 128 and a query row's log-sum-exp is below about -88.7 (pytorch/pytorch#196678, reported on
# torch 2.13 with cuDNN 9.20; NVIDIA/cudnn-frontend#628 and #1072). Packed text_s3 batches are 64 tokens long, and
# every CUDA text_s3 run ended on a non-finite loss (docs/results/paper-text-arm.md). EFFICIENT and MATH are clean
# on the same inputs. Revisit with each torch upgrade: benchmarks/cudnn_sdpa_repro.py tells whether the device's
# torch still has the bug; adding SDPBackend.CUDNN_ATTENTION back gives PyTorch's own choice. A CPU has FLASH and
# MATH only: nothing changes there.
SDPA_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs) -> torch.Tensor:
    """`F.scaled_dot_product_attention` restricted to SDPA_BACKENDS: every attention of the model goes through it."""
    with sdpa_kernel(SDPA_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, **kwargs)


@dataclass(frozen=True)
@config_defaults("model", projector_mult="projector.mult", projector_scale="projector.scale")
class ModelConfig:
    n_layers: int
    d_model: int
    d_ff: int
    n_heads: int
    vocab_size: int
    rope_base: float
    max_positions: int  # longest RoPE position id (noise jumps included)
    # Visual projector (D.6; config.yaml's `projector`); image_dim None = a text-only model
    image_dim: int | None = None  # feature size of the encoder's patch tokens
    projector_mult: float  # hidden width = projector_mult * image_dim
    projector_scale: float | None  # output scale; None: 1/sqrt(d_model), the norm of a token embedding

    def __post_init__(self) -> None:
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size")

    def to_dict(self) -> dict:
        return asdict(self)


def rope(x: torch.Tensor, cis: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved pairs (x[2i], x[2i+1]) of x (..., Dh) by the unit complex numbers cis (..., Dh/2).

    Each pair is read as the complex number x[2i] + j x[2i+1] and multiplied by cis[i] = exp(j * angle):
    one fused kernel instead of four multiplies, two adds and a stack (see benchmarks/).
    Returns float32 whatever x's dtype (callers choose the precision attention runs in).
    """
    z = torch.view_as_complex(x.float().unflatten(-1, (-1, 2)).contiguous())
    return torch.view_as_real(z * cis).flatten(-2)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.d_head = cfg.n_heads, cfg.d_model // cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=False)
        self.out = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.hook_k, self.hook_v = HookPoint(), HookPoint()
        self.hook_attn_scores = HookPoint()
        self.hook_pattern = HookPoint()

    def forward(self, x: torch.Tensor, cis: torch.Tensor, past: tuple | None = None,
                at: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Self-attention over x (B, T, D), causal or restricted by `mask` (B, 1, T, T) bool [query, key].
        `past` = (keys, values, valid, new_mask): cached keys and values (B, H, T_past, Dh) of earlier
        positions, valid (B, T_past) which of them may be attended, and new_mask (T, T) which new positions
        may attend to which (see Transformer.extend). `at` (B, Q): only query from positions at[b] of prompt
        b (keys and values from all positions); returns (B, Q, D)."""
        B, T, D = x.shape
        qkv = self.qkv(x).view(B, T, 3, self.n_heads, self.d_head)
        cpu = x.device.type == "cpu"
        dtype = torch.float32 if cpu else qkv.dtype  # see the module doc
        q, k = rope(qkv[:, :, :2], cis).to(dtype).permute(2, 0, 3, 1, 4)  # in one call: (B, H, T, Dh) each
        k, v = self.hook_k(k), self.hook_v(qkv[:, :, 2].transpose(1, 2).to(dtype))
        with torch.autocast("cpu", enabled=False) if cpu else nullcontext():
            y = self._attend(q, k, v, past, at, mask).to(qkv.dtype)  # the projections' dtype (bf16 on CPU)
        return self.out(y.transpose(1, 2).reshape(B, y.shape[2], D))

    def _attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, past: tuple | None,
                at: torch.Tensor | None, mask: torch.Tensor | None) -> torch.Tensor:
        B, _, T, _ = q.shape
        if past is not None and (at is not None or mask is not None):
            raise ValueError("Attention: `at` or `mask` and `past` (a KV cache) do not combine")
        if at is not None:
            rows = torch.arange(B, device=q.device)[:, None]
            q = q[rows, :, at].transpose(1, 2)  # (B, H, Q, Dh)
            if mask is None:
                allowed = torch.arange(T, device=q.device) <= at[..., None]  # (B, Q, T)
            else:
                allowed = mask[:, 0][rows, at]
            return sdpa(q, k, v, attn_mask=allowed[:, None])
        if past is not None:
            past_k, past_v, valid, new_mask = past
            mask = torch.cat([valid[:, None, None, :].expand(B, 1, T, -1), new_mask.expand(B, 1, T, T)], dim=-1)
            keys, values = torch.cat([past_k.to(k.dtype), k], 2), torch.cat([past_v.to(v.dtype), v], 2)
            return sdpa(q, keys, values, attn_mask=mask)
        if self.hook_attn_scores.fns or self.hook_pattern.fns:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.d_head)  # (B, H, T, T)
            allowed = torch.ones(T, T, dtype=torch.bool, device=q.device).tril() if mask is None else mask
            scores = self.hook_attn_scores(scores.masked_fill(~allowed, float("-inf")))
            pattern = self.hook_pattern(scores.softmax(dim=-1).to(v.dtype))
            return pattern @ v
        if mask is not None:
            return sdpa(q, k, v, attn_mask=mask)
        return sdpa(q, k, v, is_causal=True)


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.up = nn.Linear(cfg.d_model, cfg.d_ff, bias=False)
        self.down = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Projector(nn.Module):
    """D.6: LayerNorm -> 3-layer GELU MLP -> LayerNorm -> scale; one output token per input patch."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        dim, hidden = cfg.image_dim, max(1, round(cfg.projector_mult * cfg.image_dim))
        self.ln_in, self.ln_out = nn.LayerNorm(dim), nn.LayerNorm(cfg.d_model)
        self.fc1, self.fc2, self.fc3 = nn.Linear(dim, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, cfg.d_model)
        self.scale = cfg.projector_scale if cfg.projector_scale is not None else cfg.d_model ** -0.5

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        h = F.gelu(self.fc2(F.gelu(self.fc1(self.ln_in(features)))))
        return self.ln_out(self.fc3(h)) * self.scale


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn, self.mlp = Attention(cfg), MLP(cfg)
        self.hook_resid_pre, self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint(), HookPoint()
        self.hook_attn_out, self.hook_mlp_out = HookPoint(), HookPoint()

    def forward(self, x: torch.Tensor, cis: torch.Tensor, past: tuple | None = None,
                at: torch.Tensor | None = None, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, D) -> (B, T, D); with `at` (B, Q), the stream at positions at[b] of each prompt only, (B, Q, D)."""
        x = self.hook_resid_pre(x)
        attended = self.attn(self.ln1(x), cis, past, at, mask)
        if at is not None:
            x = x[torch.arange(len(x), device=x.device)[:, None], at]
        x = self.hook_resid_mid(x + self.hook_attn_out(attended))
        return self.hook_resid_post(x + self.hook_mlp_out(self.mlp(self.ln2(x))))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.unembed = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.projector = Projector(cfg) if cfg.image_dim is not None else None
        d_head = cfg.d_model // cfg.n_heads
        inv_freq = cfg.rope_base ** (-torch.arange(0, d_head, 2, dtype=torch.float64) / d_head)
        angles = torch.arange(cfg.max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
        cis = torch.polar(torch.ones_like(angles), angles).to(torch.complex64)  # (max_positions, Dh/2)
        self.register_buffer("rope_cis", cis, persistent=False)
        for name, module in self.named_modules():
            if isinstance(module, HookPoint):
                module.name = name
        self.reset_parameters()

    def _apply(self, fn, recurse=True):
        """`.to(dtype)`, `.bfloat16()` & co. cast every floating and complex tensor; a real dtype would drop
        the RoPE table's sine half (wrong angles). The table keeps complex64 and only follows the device."""
        cis = self._buffers.pop("rope_cis")
        try:
            super()._apply(fn, recurse)
        finally:
            self.register_buffer("rope_cis", cis.to(self.embed.weight.device), persistent=False)
        return self

    def reset_parameters(self) -> None:
        """N(0, 1/sqrt(d_model)) for every matrix, residual output projections scaled by 1/sqrt(2 * n_layers) (GPT-2).

        The paper gives no init. GPT-2's fixed 0.02 was tuned for d=768; at d=128 it is ~4x below the
        1/sqrt(d) scale, which starts attention deeper in the saddle it must escape (see README).
        """
        std = self.cfg.d_model ** -0.5
        for name, p in self.named_parameters():
            if p.dim() == 2 and not name.startswith("projector."):  # the projector keeps PyTorch's init
                residual_out = name.endswith(("attn.out.weight", "mlp.down.weight"))
                scale = 1 / math.sqrt(2 * self.cfg.n_layers) if residual_out else 1.0
                nn.init.normal_(p, std=std * scale)

    def attach_projector(self, image_dim: int, mult: float | None = None, scale: float | None = None) -> Transformer:
        """Give a text model a fresh visual projector (the start of image training); weights stay as they are.
        `mult` None: ModelConfig's projector_mult; `scale` None: 1/sqrt(d_model)."""
        mult = ModelConfig.projector_mult if mult is None else mult
        self.cfg = replace(self.cfg, image_dim=image_dim, projector_mult=mult, projector_scale=scale)
        device = self.embed.weight.device
        self.projector = Projector(self.cfg).to(device)
        return self

    def residual(self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
                 images: tuple[torch.Tensor, torch.Tensor] | None = None,
                 at: torch.Tensor | None = None, groups: torch.Tensor | None = None) -> torch.Tensor:
        """Residual stream after the last block, (B, T, d_model). positions default to 0..T-1.

        images = (mask (B, T) bool, features (M, image_dim)): the projected features replace the
        embeddings of the M positions where mask is True, in row-major order.
        at (B,) or (B, Q): return only the stream at positions at[b] of prompt b, (B, d_model) or
        (B, Q, d_model), what the full stream holds there. The last block then computes attention outputs
        and MLP at those positions alone (a training step needs only the [ANSWER] positions: 1/n_layers less
        work); its hook points see every position as usual when one of them has hooks attached (the full
        last block runs then).
        groups (B, T): query groups of a packed batch (tasks.pack_queries), -1 for the shared prefix. A
        position of query group j attends causally to the prefix and to group j only.
        """
        B, T = tokens.shape
        if positions is None:
            positions = torch.arange(T, device=tokens.device).expand(B, T)
        # on CUDA reading the max would wait for the device, and compiled it would break the graph: answer_logits
        # checks on the host
        if not (positions.is_cuda or torch.compiler.is_compiling()):
            check_positions(int(positions.max()), self.cfg)
        cis = self.rope_cis[positions][:, :, None, None]  # (B, T, 1, 1, Dh/2): broadcast over q/k and heads
        x = self.embed(tokens)
        if images is not None:
            mask, features = images
            if self.projector is None:
                raise ValueError("image tokens given to a text-only model; attach_projector() first")
            projected = self.projector(features.to(x.dtype)).to(x.dtype)  # bf16 under autocast
            # row k of `projected` to the k-th True of `mask` (row-major), as a gather: no data-dependent
            # shapes (a boolean index has them), so the step compiles (train.compile) image batches too
            if len(projected):  # none: an all-False mask leaves the embeddings as they are
                row = (mask.flatten().cumsum(0) - 1).clamp(min=0).view_as(mask)
                x = torch.where(mask[..., None], projected[row], x)
        mask = None if groups is None else group_mask(groups)
        *first, last = self.blocks
        for block in first:
            x = block(x, cis, mask=mask)
        if at is None:
            return last(x, cis, mask=mask)
        at2 = at[:, None] if at.dim() == 1 else at
        if any(m.fns for m in last.modules() if isinstance(m, HookPoint)):
            out = last(x, cis, mask=mask)[torch.arange(B, device=x.device)[:, None], at2]
        else:
            out = last(x, cis, at=at2, mask=mask)
        return out[:, 0] if at.dim() == 1 else out

    def extend(self, x: torch.Tensor, positions: torch.Tensor, keys: list, values: list, valid: torch.Tensor,
               stream: int | None = None, start: torch.Tensor | None = None,
               inject: torch.Tensor | None = None) -> torch.Tensor:
        """Run new positions through the blocks against cached keys/values of earlier ones (a KV cache).

        x (B, S, d): the residual stream of S new positions entering block 0; positions (B, S) their RoPE
        ids; keys[l] / values[l] (B, H, T_past, Dh): block l's cached keys and values of earlier positions
        (e.g. from the hook_k / hook_v points), valid (B, T_past) which of them may be attended. The new
        positions attend causally to each other, or, with `stream` = k, within consecutive groups of k only:
        S / k parallel continuations of the same prefix, k positions each. New position s is replaced by
        inject[:, s] when it enters block start[s] (start == n_layers: after the last block; beyond: never);
        this is how an interchange intervention patches every layer in one pass. Returns the residual stream
        after the last block; hook points run as usual.
        """
        S = x.shape[1]
        new_mask = torch.ones(S, S, dtype=torch.bool, device=x.device).tril()
        if stream is not None:
            group = torch.arange(S, device=x.device) // stream
            new_mask &= group[:, None] == group[None, :]
        cis = self.rope_cis[positions][:, :, None, None]

        def patch(x, layer):
            if inject is None:
                return x
            return torch.where((start == layer)[None, :, None], inject.to(x.dtype), x)

        for layer, block in enumerate(self.blocks):
            x = block(patch(x, layer), cis, (keys[layer], values[layer], valid, new_mask))
        return patch(x, len(self.blocks))

    def logits(self, resid: torch.Tensor) -> torch.Tensor:
        return self.unembed(self.ln_f(resid))

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
                images: tuple[torch.Tensor, torch.Tensor] | None = None,
                groups: torch.Tensor | None = None, at: torch.Tensor | None = None) -> torch.Tensor:
        """Logits for every position, (B, T, vocab_size); with `at`, at those positions only (residual)."""
        return self.logits(self.residual(tokens, positions, images, at=at, groups=groups))

    # --- hook API -------------------------------------------------------------------------------
    def residual_with_cache(self, names: Iterable[str], tokens: torch.Tensor, positions: torch.Tensor | None = None,
                       images: tuple[torch.Tensor, torch.Tensor] | None = None,
                       groups: torch.Tensor | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """(final residual stream (B, T, d), {name: the tensor at hook point `name`, detached}) of one forward
        pass. TransformerLens's run_with_cache returns logits first: here `model.logits(resid)` gives them."""
        cache: dict[str, torch.Tensor] = {}
        with self.hooks([(name, cache_hook(cache)) for name in names]):
            resid = self.residual(tokens, positions, images, groups=groups)
        return resid, cache

    def hook_points(self) -> dict[str, HookPoint]:
        return hook_points(self)

    def hooks(self, fwd: Iterable[tuple[str, HookFn]]):
        """`with model.hooks([(name, fn), ...]):` attaches hooks by name for the block (vlbind.model.hooks.attached)."""
        return attached(self, fwd)


def check_positions(top: int, cfg: ModelConfig) -> None:
    if top >= cfg.max_positions:
        raise ValueError(f"position id {top} exceeds ModelConfig.max_positions={cfg.max_positions}")


def group_mask(groups: torch.Tensor) -> torch.Tensor:
    """(B, 1, T, T) bool [query, key] attention mask of a packed batch: causal, and a key inside a query group
    (groups >= 0) is seen only from the same group. groups (B, T): -1 for the shared prefix."""
    T = groups.shape[1]
    causal = torch.ones(T, T, dtype=torch.bool, device=groups.device).tril()
    same = (groups[:, None, :] < 0) | (groups[:, None, :] == groups[:, :, None])
    return (causal & same)[:, None]


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())

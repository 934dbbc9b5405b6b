"""Frozen timm image encoders -> patch tokens -> the feature bank (paper, appendix D.6, "Image Encoders").

- ViTs: the last layer's tokens from `forward_features`, with the `num_prefix_tokens` CLS/register tokens
  dropped (DINOv3 has 1 + 4 of them).
- CNNs: the final feature map (B, C, H, W), flattened row-major to H*W "pseudo-patch" tokens.
- `grid`: optionally average-pool the token grid to grid x grid tokens (not the paper, which keeps one
  token per patch; the mini overlay uses it to fit a CPU).

Preprocessing: images are rendered at the encoder's input size and only normalised with the mean/std of
timm's data config. timm's eval transform would also centre-crop (crop_pct < 1), cutting off shapes drawn
near the border, so we do not use it.

Pretrained weights come from the Hugging Face hub through timm. When they are neither cached nor a
local `checkpoint` file is configured and the hub is unreachable, loading fails at once with
`EncoderWeightsError` saying how to provide them (no minutes of hub retries, never silent random weights).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vlbind.core.device import autocast
from vlbind.core.files import atomic_write, write_json
from vlbind.core.schema import schema_defaults
from vlbind.core.settings import config_defaults, from_dict
from vlbind.data.render import load_image

log = logging.getLogger(__name__)
HUB_HOST = "huggingface.co"


RANDOM_WEIGHTS_SEED = 0  # seeds an encoder's random weights (pretrained: false), so extractions agree


class EncoderWeightsError(RuntimeError):
    pass


# An encoder entry's settings other than its timm_name: their one default is the schema's
_ENTRY = schema_defaults("encoders.*")


@dataclass(frozen=True)
@config_defaults("encoders.*")
class EncoderSpec:
    """One entry of config key `encoders` (its defaults: the schema's; the paper's three entries: config.yaml)."""
    timm_name: str
    pretrained: bool = _ENTRY["pretrained"]  # [paper] frozen pretrained encoders; false = random weights (tests)
    checkpoint: str | None = _ENTRY["checkpoint"]  # a local weights file to use instead of the hub
    grid: int | None = _ENTRY["grid"]  # pool the token grid to grid x grid; None keeps every patch (paper)
    model_kwargs: dict = field(default_factory=lambda: dict(_ENTRY["model_kwargs"]))  # to timm.create_model
    pretrain: dict | None = _ENTRY["pretrain"]  # set: weights pretrained on renderings by the DAG (vision/pretrain.py)

    @classmethod
    def from_dict(cls, d: dict) -> EncoderSpec:
        return from_dict(cls, d)

    def to_dict(self) -> dict:
        return asdict(self)


def _hub_reachable(timeout: float = 5.0) -> bool:
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("0", "", "false"):
        return False
    try:
        socket.create_connection((HUB_HOST, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _cached_weights(timm_name: str) -> str | None:
    import timm
    from huggingface_hub import try_to_load_from_cache

    hub_id = timm.models.get_pretrained_cfg(timm_name).hf_hub_id
    for filename in ("model.safetensors", "open_clip_pytorch_model.bin", "pytorch_model.bin"):
        path = try_to_load_from_cache(hub_id, filename) if hub_id else None
        if isinstance(path, str):
            return path
    return None


def _weights_help(spec: EncoderSpec, why: str) -> str:
    return (f"cannot load pretrained weights for timm model {spec.timm_name!r}: {why}.\n"
            "Provide them offline in one of three ways:\n"
            f"  1. on a machine with internet run: python -c \"import timm; timm.create_model('{spec.timm_name}', "
            "pretrained=True)\"\n     then copy its Hugging Face cache (~/.cache/huggingface, or $HF_HOME) here;\n"
            "  2. download the weights file and set `checkpoint: /path/to/model.safetensors` for this encoder "
            "in your config;\n"
            "  3. set `pretrained: false` for random frozen weights (not the paper's setting; figures say so).")


def load_encoder(spec: EncoderSpec) -> torch.nn.Module:
    """The frozen encoder in eval mode, classifier removed; random weights (`pretrained: false`) are drawn from
    RANDOM_WEIGHTS_SEED, so every extraction of a bank gives the same features."""
    import timm

    kwargs = dict(num_classes=0, **spec.model_kwargs)
    if not spec.pretrained:  # random weights, the same in every process; the caller's RNG is left untouched
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(RANDOM_WEIGHTS_SEED)
            model = timm.create_model(spec.timm_name, pretrained=False, **kwargs)
    else:
        file = spec.checkpoint
        if file is not None and not Path(file).is_file():
            raise EncoderWeightsError(_weights_help(spec, f"checkpoint file {file} does not exist"))
        file = file or _cached_weights(spec.timm_name)
        if file is None and not _hub_reachable():
            raise EncoderWeightsError(_weights_help(spec, f"they are not cached and {HUB_HOST} is unreachable"))
        try:
            overlay = {"pretrained_cfg_overlay": {"file": str(file)}} if file else {}
            model = timm.create_model(spec.timm_name, pretrained=True, **overlay, **kwargs)
        except Exception as e:  # timm raises many kinds; all mean the same thing to the user
            raise EncoderWeightsError(_weights_help(spec, f"{type(e).__name__}: {e}")) from e
    return model.eval().requires_grad_(False)


def normalizer(model: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    import timm

    cfg = timm.data.resolve_data_config({}, model=model)
    return torch.tensor(cfg["mean"]).view(1, 3, 1, 1), torch.tensor(cfg["std"]).view(1, 3, 1, 1)


def patch_tokens(model: torch.nn.Module, x: torch.Tensor, grid: int | None = None) -> torch.Tensor:
    """(B, 3, H, W) normalised images -> (B, tokens, features), prefix tokens dropped, optionally pooled."""
    f = model.forward_features(x)
    if f.dim() == 4:  # CNN feature map
        fmap = f
    else:
        f = f[:, getattr(model, "num_prefix_tokens", 0):]
        side = math.isqrt(f.shape[1])
        if side * side != f.shape[1]:
            raise ValueError(f"{f.shape[1]} patch tokens do not form a square grid")
        fmap = f.transpose(1, 2).unflatten(2, (side, side))
    if grid is not None:
        fmap = F.adaptive_avg_pool2d(fmap, grid)
    return fmap.flatten(2).transpose(1, 2)


def to_tensor(images: np.ndarray, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """(B, H, W, 3) uint8 -> normalised (B, 3, H, W) float."""
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255)
    return (x - mean) / std


@torch.no_grad()
def extract(spec: EncoderSpec, image_dir: Path, n_images: int, out: Path, *, batch_size: int,
            device: str = "cpu", precision: str = "fp32", model: torch.nn.Module | None = None) -> dict:
    """Encode images 0..n_images-1 of a bank once into `out` (.npy, float16, (N, tokens, features)) and
    write its index `out.with_suffix('.json')`, `batch_size` images per encoder pass (config key
    vision.extract_batch_size). Returns the index."""
    model = (model or load_encoder(spec)).to(device)
    mean, std = normalizer(model)
    out = Path(out)
    t0 = time.time()

    def write(tmp) -> None:
        features = None
        for start in range(0, n_images, batch_size):
            ids = range(start, min(start + batch_size, n_images))
            x = to_tensor(np.stack([load_image(image_dir, i) for i in ids]), mean, std).to(device)
            with autocast(device, precision):
                tokens = patch_tokens(model, x, spec.grid)
            if features is None:
                features = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16,
                                                     shape=(n_images, *tokens.shape[1:]))
            features[start:start + len(ids)] = tokens.float().cpu().numpy().astype(np.float16)
            done = start + len(ids)
            rate = done / max(time.time() - t0, 1e-9)
            log.info("%s: %d/%d images, %.1f images/s, ETA %.0f s", spec.timm_name, done, n_images, rate,
                     (n_images - done) / rate)
        features.flush()

    atomic_write(out, write)
    arr = np.load(out, mmap_mode="r")
    index = {"encoder": spec.to_dict(), "n_images": n_images, "tokens_per_image": arr.shape[1],
             "dim": arr.shape[2], "grid": math.isqrt(arr.shape[1]), "precision": precision}
    write_json(out.with_suffix(".json"), index)
    return index

"""Pretraining a small frozen encoder on renderings, for machines without a model hub (the mini scale).

The paper's encoders are supervised ImageNet models (appendix D.6). Random-weight ones see almost nothing
(a random ResNet-152's features barely decode shape on held-out renderings: benchmarks/bench_encoder_probes.py),
so mini trains its own: a timm CNN from scratch, supervised to classify the color and the shape of one rendered
object, on a bank rendered apart from the image bank (its own seed, wider range of sizes, random places). The two
linear heads are thrown away; the backbone is saved as safetensors and then loaded like any other local
checkpoint (`encoders.load_encoder`). Images are normalised as extraction normalises them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from vlbind.core.device import autocast
from vlbind.core.files import atomic_write, write_json
from vlbind.core.schema import check_fields, schema_defaults
from vlbind.core.settings import config_defaults, from_dict
from vlbind.core.vocab import SHAPES
from vlbind.data.render import RenderConfig, layout_objects, placements, render
from vlbind.vision.encoders import normalizer, to_tensor

log = logging.getLogger(__name__)


_PRETRAIN = schema_defaults("encoders.*.pretrain")  # the one home of these defaults (no config.yaml entry pretrains)


@dataclass(frozen=True)
@config_defaults("encoders.*.pretrain")
class PretrainConfig:
    """An encoder entry's `pretrain` section: its weights trained on renderings by rule pretrain_encoder."""
    renderings: int = _PRETRAIN["renderings"]  # per color-shape pair
    held_out: float = _PRETRAIN["held_out"]  # share of them kept out of training, to report accuracy on
    min_scale: float = _PRETRAIN["min_scale"]  # shape side / image side; wider than the image bank's
    max_scale: float = _PRETRAIN["max_scale"]
    epochs: int = _PRETRAIN["epochs"]
    batch_size: int = _PRETRAIN["batch_size"]
    lr: float = _PRETRAIN["lr"]
    seed: int = _PRETRAIN["seed"]  # renders and initialises; the image bank renders from render.seed (0)

    def __post_init__(self) -> None:
        check_fields("encoders.*.pretrain", self)  # types and ranges: the schema's (renderings >= 2: one held out)
        if self.min_scale > self.max_scale:
            raise ValueError(f"PretrainConfig needs min_scale <= max_scale, got {self.min_scale} > {self.max_scale}")

    @classmethod
    def from_dict(cls, d: dict) -> PretrainConfig:
        return from_dict(cls, d)


def render_set(cfg: PretrainConfig, size: int, n_colors: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(images (N, size, size, 3) uint8, color (N,), shape (N,)) with 0-based labels, one object per image."""
    objects = layout_objects(RenderConfig(size=size, n_colors=n_colors, renderings=cfg.renderings, seed=cfg.seed,
                                          min_scale=cfg.min_scale, max_scale=cfg.max_scale))
    images = np.stack([render([placed], size) for placed in placements(objects)])
    return images, objects["color"].to_numpy() - 1, objects["shape"].to_numpy() - 1


def pretrain(timm_name: str, cfg: PretrainConfig, size: int, n_colors: int, out: Path, *,
             device: str = "cpu", precision: str = "fp32", model_kwargs: dict | None = None) -> dict:
    """Train `timm_name` from scratch to classify color and shape; save its backbone (no classifier) to `out`
    (safetensors) and its held-out accuracies to `out` with suffix .json. Returns those accuracies."""
    import timm
    from safetensors.torch import save_file

    t0 = time.time()
    images, colors, shapes = render_set(cfg, size, n_colors)
    rng = np.random.default_rng(cfg.seed)
    test = rng.random(len(images)) < cfg.held_out
    log.info("rendered %d images (%d held out) in %.0f s", len(images), test.sum(), time.time() - t0)

    torch.manual_seed(cfg.seed)
    model = timm.create_model(timm_name, pretrained=False, num_classes=0, **(model_kwargs or {})).to(device)
    heads = torch.nn.ModuleDict({"color": torch.nn.Linear(model.num_features, n_colors),
                                 "shape": torch.nn.Linear(model.num_features, len(SHAPES))}).to(device)
    mean, std = normalizer(model)
    opt = torch.optim.AdamW([*model.parameters(), *heads.parameters()], lr=cfg.lr)
    train_ids = np.flatnonzero(~test)
    steps = cfg.epochs * (len(train_ids) // cfg.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, cfg.lr, total_steps=steps)
    labels = {"color": torch.from_numpy(colors), "shape": torch.from_numpy(shapes)}

    def logits(ids):
        x = to_tensor(images[ids], mean, std).to(device)
        with autocast(device, precision):
            f = model(x)
            return {k: h(f).float() for k, h in heads.items()}

    step, t0 = 0, time.time()
    model.train()
    for epoch in range(cfg.epochs):
        order = rng.permutation(train_ids)
        for start in range(0, len(order) - cfg.batch_size + 1, cfg.batch_size):
            ids = order[start:start + cfg.batch_size]
            out_ = logits(ids)
            loss = sum(F.cross_entropy(out_[k], labels[k][ids].to(device)) for k in heads)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            step += 1
            if step % 25 == 0 or step == steps:
                rate = step / (time.time() - t0)
                log.info("epoch %d step %d/%d: loss %.3f, %.1f steps/s, ETA %.0f s", epoch + 1, step, steps,
                         loss.item(), rate, (steps - step) / rate)

    model.eval()
    result = held_out_accuracy(logits, labels, np.flatnonzero(test))
    result.update(timm_name=timm_name, images=len(images), held_out=int(test.sum()), steps=steps,
                  seconds=round(time.time() - t0, 1), config=asdict(cfg))
    log.info("held-out accuracy: color %.3f, shape %.3f", result["held_out_color_accuracy"],
             result["held_out_shape_accuracy"])
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    atomic_write(out, lambda tmp: save_file(state, tmp))
    write_json(Path(out).with_suffix(".json"), result)
    return result


@torch.no_grad()
def held_out_accuracy(logits, labels: dict[str, torch.Tensor], test_ids: np.ndarray, batch: int = 256) -> dict:
    """{held_out_<head>_accuracy: share right} of each classifier head over the held-out images `test_ids`, scored
    `batch` at a time through `logits(ids) -> {head: logits}`."""
    hits = dict.fromkeys(labels, 0)
    for start in range(0, len(test_ids), batch):
        ids = test_ids[start:start + batch]
        for k, v in logits(ids).items():
            hits[k] += int((v.argmax(-1).cpu() == labels[k][ids]).sum())
    return {f"held_out_{k}_accuracy": hits[k] / len(test_ids) for k in labels}

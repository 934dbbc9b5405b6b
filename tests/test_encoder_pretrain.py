"""Pretraining mini's frozen encoder on renderings (vlbind.vision.pretrain) and loading it for extraction."""

import json

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from vlbind.data.render import SHAPES, RenderConfig, layout_objects
from vlbind.vision.encoders import EncoderSpec, load_encoder
from vlbind.vision.pretrain import PretrainConfig, pretrain, render_set

TINY = PretrainConfig(renderings=2, held_out=0.25, epochs=1, batch_size=16)


def test_pretraining_set_is_rendered_apart_from_the_image_bank():
    images, colors, shapes = render_set(TINY, size=32, n_colors=2)
    assert images.shape == (2 * 13 * 2, 32, 32, 3) and images.dtype == np.uint8
    assert sorted(set(colors.tolist())) == [0, 1] and sorted(set(shapes.tolist())) == list(range(len(SHAPES)))
    bank = layout_objects(RenderConfig(size=32, n_colors=2, renderings=2))  # the image bank: render.seed 0
    mine = layout_objects(RenderConfig(size=32, n_colors=2, renderings=2, seed=TINY.seed, min_scale=TINY.min_scale,
                                       max_scale=TINY.max_scale))
    assert not np.array_equal(bank[["x0", "y0", "x1"]].to_numpy(), mine[["x0", "y0", "x1"]].to_numpy())


def test_pretrained_backbone_loads_through_the_checkpoint_path_unchanged(tmp_path):
    out = tmp_path / "enc.safetensors"
    result = pretrain("resnet18", TINY, 32, 2, out)
    saved = load_file(out)
    assert not any(k.startswith("fc.") for k in saved)  # the heads are not part of the encoder
    loaded = load_encoder(EncoderSpec("resnet18", pretrained=True, checkpoint=str(out))).state_dict()
    assert set(loaded) == set(saved) and all(torch.equal(loaded[k], saved[k]) for k in saved)
    report = json.loads(out.with_suffix(".json").read_text())
    assert report == json.loads(json.dumps(result)) and 0 <= report["held_out_shape_accuracy"] <= 1
    assert report["held_out"] > 0 and report["images"] == 2 * 13 * 2


def test_pretraining_is_deterministic(tmp_path):
    a = pretrain("resnet18", TINY, 32, 2, tmp_path / "a.safetensors")
    b = pretrain("resnet18", TINY, 32, 2, tmp_path / "b.safetensors")
    wa, wb = load_file(tmp_path / "a.safetensors"), load_file(tmp_path / "b.safetensors")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert a["held_out_color_accuracy"] == b["held_out_color_accuracy"]


def test_pretraining_config_rejects_what_cannot_hold_a_rendering_out():
    with pytest.raises(ValueError, match="renderings"):
        PretrainConfig(renderings=1)
    with pytest.raises(ValueError, match="unknown PretrainConfig keys"):
        PretrainConfig.from_dict({"epoch": 3})
    with pytest.raises(ValueError, match="min_scale <= max_scale"):  # when built, not when first rendered
        PretrainConfig(min_scale=0.9, max_scale=0.5)

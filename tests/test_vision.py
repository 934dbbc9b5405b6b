"""The vision arm: rendering, the feature bank, image-context prompts, the projector, divergence."""

import itertools
import math
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml

from vlbind.core.vocab import VOCAB
from vlbind.data.bank import ImageBank
from vlbind.data.render import SHAPES, WEB_SAFE, RenderConfig, hex_to_rgb, layout_objects, render, render_bank
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import IMAGE, RETRIEVAL, TEXT, Role, generate
from vlbind.evaluation.outcomes import divergence
from vlbind.model.checkpoint import load_model, save_model
from vlbind.model.inference import answer_logits, model_inputs
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.config import TrainConfig
from vlbind.training.loop import train_attempt
from vlbind.vision.encoders import EncoderSpec, EncoderWeightsError, extract, load_encoder, normalizer, patch_tokens

ROOT = Path(__file__).resolve().parents[1]
WHITE = np.array([255, 255, 255])


# --- rendering -------------------------------------------------------------------------------------

def test_web_safe_palette_is_the_rgb_grid():
    assert len(WEB_SAFE) == 216 and len(set(WEB_SAFE)) == 216
    assert WEB_SAFE[:8] == ("#000000", "#000033", "#000066", "#000099", "#0000cc", "#0000ff", "#003300", "#003333")
    levels = {0, 0x33, 0x66, 0x99, 0xCC, 0xFF}
    assert all(set(hex_to_rgb(c)) <= levels for c in WEB_SAFE)


def test_every_shape_renders_distinct_from_every_other():
    masks = {s: (render([(0, i, (8, 8, 120, 120))], 128) != 255).any(-1) for i, s in enumerate(SHAPES)}
    assert len(masks) == 13
    for a, b in itertools.combinations(SHAPES, 2):
        differ = (masks[a] != masks[b]).sum()
        assert differ > 0.05 * min(masks[a].sum(), masks[b].sum()), (a, b, differ)


def test_each_color_pixels_match_its_hex():
    for color in range(215):  # #ffffff (color0216) is white on white: see the render.py docstring
        pixels = render([(color, 0, (10, 20, 54, 44))], 64).reshape(-1, 3)  # a rectangle
        ink = pixels[(pixels != WHITE).any(-1)]
        assert len(ink) > 0.5 * 44 * 24, WEB_SAFE[color]
        assert (ink == hex_to_rgb(WEB_SAFE[color])).all(), WEB_SAFE[color]  # crisp edges: nothing blended


@pytest.mark.parametrize("layout", ["per_object", "canvas"])
def test_layouts_place_shapes_within_bounds_without_overlap(layout, tmp_path):
    cfg = RenderConfig(layout=layout, size=96, renderings=2, n_images=20, min_objects=2, max_objects=8)
    objects = render_bank(cfg, tmp_path)
    assert ((objects[["x0", "y0"]] >= 0).all(axis=None)) and ((objects[["x1", "y1"]] <= cfg.size).all(axis=None))
    for image, o in objects.groupby("image"):
        boxes = o[["x0", "y0", "x1", "y1"]].to_numpy()
        for a, b in itertools.combinations(boxes, 2):
            assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (image, a, b)
        assert o["color"].is_unique and o["shape"].is_unique
        pixels = np.asarray(__import__("PIL.Image", fromlist=["Image"]).open(tmp_path / "images" / f"{image:06d}.png"))
        inside = np.zeros(pixels.shape[:2], bool)
        for r in o.itertuples():  # each object's ink lies in its box and has its color
            box = pixels[r.y0:r.y1, r.x0:r.x1].reshape(-1, 3)
            ink = box[(box != WHITE).any(-1)]
            assert len(ink) and (ink == hex_to_rgb(r.hex)).all()
            inside[r.y0:r.y1, r.x0:r.x1] = True
        assert (pixels[~inside] == 255).all()
    if layout == "per_object":  # every color-shape pair, `renderings` times
        assert len(objects) == cfg.n_colors * 13 * cfg.renderings
        assert objects.groupby(["color", "shape"]).size().eq(cfg.renderings).all()


# --- encoders and the feature bank -----------------------------------------------------------------

def default_encoders():
    return yaml.safe_load((ROOT / "config" / "config.yaml").read_text())["encoders"]


@pytest.mark.parametrize("name", ["resnet152", "vit_b16", "dinov3_vitb16"])
def test_default_encoders_give_patch_tokens_without_prefix(name, tmp_path):
    spec = EncoderSpec.from_dict({**default_encoders()[name], "pretrained": False})
    expected = {"resnet152": (49, 2048, 0), "vit_b16": (196, 768, 1), "dinov3_vitb16": (196, 768, 5)}[name]
    render_bank(RenderConfig(n_colors=1, renderings=1, size=224), tmp_path)
    torch.manual_seed(0)
    model = load_encoder(spec)
    assert getattr(model, "num_prefix_tokens", 0) == expected[2]
    index = extract(spec, tmp_path / "images", 2, tmp_path / "f.npy", batch_size=2, model=model)
    feats = np.load(tmp_path / "f.npy", mmap_mode="r")
    assert feats.shape == (2, expected[0], expected[1]) and feats.dtype == np.float16
    assert (index["tokens_per_image"], index["dim"]) == expected[:2]
    # the same tokens as timm's own forward_features with the prefix dropped (CNN: the flattened map)
    from vlbind.data.render import load_image
    from vlbind.vision.encoders import to_tensor
    mean, std = normalizer(model)
    x = to_tensor(np.stack([load_image(tmp_path / "images", i) for i in range(2)]), mean, std)
    with torch.no_grad():
        raw = model.forward_features(x)
    raw = raw.flatten(2).transpose(1, 2) if raw.dim() == 4 else raw[:, expected[2]:]
    np.testing.assert_allclose(feats, raw.numpy().astype(np.float16), rtol=1e-2, atol=1e-2)


def test_grid_pooling_averages_patches():
    model = __import__("timm").create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=64).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        full, pooled = patch_tokens(model, x), patch_tokens(model, x, grid=2)
    assert full.shape == (2, 16, 192) and pooled.shape == (2, 4, 192)
    grid = full.reshape(2, 4, 4, 192)  # row-major 4x4 -> the top-left 2x2 block is pooled token 0
    torch.testing.assert_close(pooled[:, 0], grid[:, :2, :2].mean((1, 2)))
    torch.testing.assert_close(pooled[:, 3], grid[:, 2:, 2:].mean((1, 2)))


def test_pretrained_weights_missing_fail_at_once_with_help(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.setattr("vlbind.vision.encoders._cached_weights", lambda name: None)
    t0 = time.time()
    with pytest.raises(EncoderWeightsError, match="pretrained: false") as e:
        load_encoder(EncoderSpec("resnet18.a1_in1k"))
    assert time.time() - t0 < 5 and "checkpoint" in str(e.value) and "resnet18.a1_in1k" in str(e.value)
    with pytest.raises(EncoderWeightsError, match="does not exist"):
        load_encoder(EncoderSpec("resnet18.a1_in1k", checkpoint=str(tmp_path / "nope.safetensors")))


def make_bank(tmp_path, layout, tokens=4, dim=6, renderings=2, **kw) -> ImageBank:
    """A rendered bank with random stand-in features (the prompt logic never looks inside them)."""
    cfg = RenderConfig(layout=layout, size=64, renderings=renderings, n_images=200, **kw)
    objects = layout_objects(cfg)
    n = objects["image"].max() + 1
    rng = np.random.default_rng(0)
    return ImageBank(layout, objects, rng.standard_normal((n, tokens, dim)).astype(np.float16), {})


def solve_image_prompt(b, i, objects: pd.DataFrame) -> int:
    """Answer of image prompt i, recomputed from the bank's object table and the prompt's text part (queried
    by color or by shape)."""
    images = list(dict.fromkeys(b.image_ids[i, b.roles[i] == Role.CONTEXT_IMAGE].tolist()))  # in context order
    table = objects.set_index(["image", "object"]).sort_index()
    pairs = [(VOCAB.color_offset + r.color - 1, VOCAB.shape_offset + r.shape - 1)
             for img in images for r in table.loc[img].itertuples()]
    end = np.flatnonzero(b.tokens[i] == VOCAB.context_end)[0]
    text = b.tokens[i, end + 1: b.answer_pos[i] - 2].tolist()
    assoc = {text[k]: text[k + 1] for k in range(0, len(text), 3)}
    query = b.tokens[i, b.answer_pos[i] - 1]
    (entity,) = [s if c == query else c for c, s in pairs if query in (c, s)]
    return assoc[entity] if assoc else entity


@pytest.mark.parametrize("layout", ["per_object", "canvas"])
def test_image_prompt_answer_recomputed_from_object_table(layout, tmp_path):
    bank = make_bank(tmp_path, layout)
    spec = StageSpec(n_colors=8, n_shapes=13, n_items=8, min_objects=2, max_objects=8, grounding_fraction=0.5,
                     image_fraction=1.0)
    b = generate(spec, 300, np.random.default_rng(1), bank=bank, query_by=0)
    assert (b.modality == IMAGE).all()
    for i in range(len(b)):
        assert solve_image_prompt(b, i, bank.objects) == b.target[i]
        ctx = b.roles[i] == Role.CONTEXT_IMAGE
        assert (b.tokens[i, ctx] == VOCAB.image).all() and (b.image_ids[i, ~ctx] == -1).all()
        n = b.n_objects[i]
        assert ctx.sum() == (4 * n if layout == "per_object" else 4)
    if layout == "per_object":  # each object's image shows exactly that slot's color and shape
        r, t = np.nonzero(b.roles == Role.CONTEXT_IMAGE)
        o = bank.objects.set_index("image")
        np.testing.assert_array_equal(o.loc[b.image_ids[r, t], "color"].to_numpy() - 1 + VOCAB.color_offset,
                                      b.colors[r, b.slots[r, t]])
    else:  # a patch's slot is the object whose box holds its centre
        img, patch = b.image_ids[b.roles == Role.CONTEXT_IMAGE], b.patches[b.roles == Role.CONTEXT_IMAGE]
        slot = b.slots[b.roles == Role.CONTEXT_IMAGE]
        side, size = 2, 64
        assert (slot >= 0).sum() >= 20  # patches that show an object: the loop below checks something
        for k in np.flatnonzero(slot >= 0)[:200]:
            r = bank.objects[(bank.objects.image == img[k]) & (bank.objects.object == slot[k])].iloc[0]
            cx, cy = (patch[k] % side + 0.5) * size / side, (patch[k] // side + 0.5) * size / side
            assert r.x0 <= cx < r.x1 and r.y0 <= cy < r.y1


def test_mixed_stage_holds_its_image_share(tmp_path):
    bank = make_bank(tmp_path, "per_object")
    spec = StageSpec(n_colors=8, n_shapes=13, n_items=8, max_objects=8, image_fraction=0.2)
    n, rng = 20000, np.random.default_rng(3)
    share = np.concatenate([generate(spec, 1000, rng, bank=bank).modality for _ in range(n // 1000)]).mean()
    assert abs(share - 0.2) < 4 * math.sqrt(0.2 * 0.8 / n)  # within 4 standard errors


@pytest.mark.parametrize("spec, digest", [
    (StageSpec(max_objects=8, symmetric_fraction=0.0), "b61554db46324e2f"),  # the old default, written out
    (StageSpec(8, 8, 8, 2, 2, shuffle=False, symmetric_fraction=0.5), "838e3259a5c4e4a0"),
    (StageSpec(noise_tokens=100, noise_fraction=0.5, grounding_fraction=0.5, symmetric_fraction=0.5),
     "79f0f2b6a44e2d5d"),
])
def test_text_stages_draw_the_same_prompts_as_before_the_image_arm(spec, digest):
    """A text stage draws no modality randoms: its prompts (tokens, positions, answers) are those the code
    before the vision arm drew (digests computed at commit 1f421be^), so the text arm's results still hold."""
    import hashlib

    b = generate(spec, 64, np.random.default_rng(5))
    assert (b.modality == TEXT).all() and (b.image_ids == -1).all()
    assert hashlib.sha256(b.tokens.tobytes() + b.positions.tobytes() + b.target.tobytes()).hexdigest()[:16] == digest


def test_image_prompt_without_bank_is_an_error():
    with pytest.raises(ValueError, match="image bank"):
        generate(StageSpec(n_colors=8, n_shapes=13, n_items=8, image_fraction=1.0), 4, np.random.default_rng(0))


def test_bank_rejects_colors_it_does_not_hold(tmp_path):
    bank = make_bank(tmp_path, "per_object")
    with pytest.raises(ValueError, match="n_colors"):
        generate(StageSpec(n_colors=16, n_shapes=13, n_items=8, image_fraction=1.0), 8, np.random.default_rng(0),
                 bank=bank)


# --- projector and image inputs --------------------------------------------------------------------

def tiny(n_layers=2, **kw) -> Transformer:
    torch.manual_seed(0)
    return Transformer(ModelConfig(n_layers=n_layers, d_model=32, d_ff=64, n_heads=2, **kw))


def test_projected_features_replace_the_image_embeddings(tmp_path):
    bank = make_bank(tmp_path, "per_object", dim=6)
    model = tiny().attach_projector(6, mult=2.0)
    b = generate(StageSpec(n_colors=8, n_shapes=13, n_items=8, image_fraction=0.5), 8, np.random.default_rng(0),
                 bank=bank)
    tokens, positions, images = model_inputs(b, "cpu", bank)
    with torch.no_grad():
        got = model(tokens, positions, images)
        # naive: embed every position, then overwrite image positions one by one with projector(feature)
        x = model.embed(tokens)
        for r, t in zip(*np.nonzero(b.image_ids >= 0)):
            f = torch.from_numpy(bank.features[b.image_ids[r, t], b.patches[r, t]].astype(np.float32))
            x[r, t] = model.projector(f)
        cis = model.rope_cis[positions][:, :, None, None]
        for block in model.blocks:
            x = block(x, cis)
        torch.testing.assert_close(got, model.logits(x))
    assert model.projector.fc1.out_features == 12 and model.projector.fc3.out_features == 32


def test_projector_scale_defaults_to_embedding_norm():
    p = tiny().attach_projector(6).projector
    out = p(torch.randn(100, 6))
    torch.testing.assert_close(out.norm(dim=-1).mean(), torch.tensor(1.0), atol=0.05, rtol=0)


def test_vision_stage_starts_from_its_parent_exactly(tmp_path):
    parent = tiny()
    save_model(tmp_path / "grounding", parent, {"stage": "grounding"}, pd.DataFrame())
    child, _ = load_model(tmp_path / "grounding")
    child.attach_projector(6)
    parent_state = parent.state_dict()
    for k, v in child.state_dict().items():
        if not k.startswith("projector."):
            assert torch.equal(v, parent_state[k]), k
    b = generate(StageSpec(max_objects=4, n_items=8), 16, np.random.default_rng(0))  # text prompts: same logits
    torch.testing.assert_close(answer_logits(child, b, "cpu"), answer_logits(parent, b, "cpu"), rtol=0, atol=0)
    save_model(tmp_path / "image", child, {"stage": "image"}, pd.DataFrame())  # the projector round-trips
    again, _ = load_model(tmp_path / "image")
    assert again.cfg.image_dim == 6
    for k, v in child.state_dict().items():
        assert torch.equal(v, again.state_dict()[k]), k


# --- divergence --------------------------------------------------------------------------------------

def test_injected_nan_is_detected_as_divergence(tmp_path):
    """NaN weights after step 3: step 4's loss is not finite, its step skipped; allowed none, the stage ends at the
    next validation and the run counts as diverged."""
    from vlbind.core.settings import NON_FINITE

    model = tiny()

    def poison(step):
        if step == 3:
            with torch.no_grad():
                model.embed.weight[VOCAB.answer].fill_(float("nan"))

    cfg = TrainConfig(warmup_steps=1, batch_size=4, eval_every=2, val_size=8, max_steps=20, target_accuracy=None,
                      max_skipped_steps=0)
    meta = train_attempt(model, StageSpec(max_objects=2, n_items=8), cfg, tmp_path, stage="image", callback=poison)
    assert meta["stopped_because"] == NON_FINITE and (meta["steps"], meta["skipped_steps"]) == (4, 1)
    curve = pd.read_parquet(tmp_path / "metrics.parquet")
    assert "non-finite" in divergence({"text_s1": curve.iloc[:1], "image": curve}, collapse_drop=0.5)
    assert divergence({"text_s1": curve.iloc[:1]}, collapse_drop=0.5) is None


def test_validation_collapse_is_divergence_and_a_plateau_is_not():
    def curve(accs):
        return pd.DataFrame({"step": range(len(accs)), "val_accuracy": accs, "finite": True})
    assert divergence({"mixed": curve([0.2, 0.9, 0.3])}, 0.5).startswith("mixed: validation accuracy collapsed")
    assert divergence({"mixed": curve([0.2, 0.9, 0.5])}, 0.5) is None
    assert divergence({"a": curve([0.5, 0.5]), "b": curve([0.1, 0.1])}, 0.5) is None


def test_a_stage_that_stays_at_chance_stalls_and_marks_the_run(tmp_path):
    from vlbind.evaluation.outcomes import STALLED
    from vlbind.evaluation.tables import ood_summary, run_summary
    from vlbind.training.loop import validation_set

    spec = StageSpec(min_objects=2, max_objects=8, n_items=8)
    cfg = TrainConfig(warmup_steps=1, batch_size=4, eval_every=2, val_size=64, max_steps=4, target_accuracy=None)
    meta = train_attempt(tiny(), spec, cfg, tmp_path / "s", stage="text_s4")
    n = np.concatenate([b.n_objects for b in validation_set(spec, cfg)])
    assert meta["val_chance"] == pytest.approx(np.mean(1 / n))  # a guess among each prompt's objects
    curves = {"text_s4": pd.read_parquet(tmp_path / "s" / "metrics.parquet")}
    assert meta["best_val_accuracy"] <= meta["val_chance"] + 0.2  # 4 steps of a tiny model learn nothing
    why = divergence(curves, 0.5, {"text_s4": meta}, stall_margin=0.2)
    assert why.startswith(f"text_s4: {STALLED}")
    assert divergence(curves, 0.5, {"text_s4": meta}, stall_margin=None) is None  # the rule off
    skipped = {**meta, "steps": 0}  # max_steps 0 passes weights through: not a stall
    assert divergence(curves, 0.5, {"text_s4": skipped}, stall_margin=0.2) is None
    learnt = {**meta, "best_val_accuracy": meta["val_chance"] + 0.3}
    assert divergence(curves, 0.5, {"text_s4": learnt}, stall_margin=0.2) is None
    evals = pd.DataFrame({"variant": "text_only", "run": ["seed0", "seed1"], "order": "shuffled", "n_objects": 9,
                          "accuracy": 0.1, "in_distribution": False, "diverged": [True, False],
                          "divergence": [why, ""], "converged": True, "convergence": ""})
    summary = ood_summary(evals)
    assert summary.loc["text_only", ["runs", "diverged_runs", "stalled_runs"]].tolist() == [1, 1, 1]
    line = run_summary(summary.reset_index().assign(order="shuffled")).splitlines()[1]
    assert f"(1 diverged, 1 of them {STALLED})" in line


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_image_stage_trains_and_resumes_identically(tmp_path, precision):
    """A short image stage runs end to end (features gathered from the bank every step) and is deterministic,
    in float32 and under bf16 autocast (the projector's bf16 output goes into the float32 embeddings)."""
    bank = make_bank(tmp_path, "per_object", dim=6)
    spec = StageSpec(n_colors=8, n_shapes=13, n_items=8, max_objects=3, grounding_fraction=0.5, image_fraction=1.0)
    cfg = TrainConfig(warmup_steps=2, batch_size=8, eval_every=2, val_size=16, max_steps=6, target_accuracy=None,
                      precision=precision)
    metas = []
    for run in ("a", "b"):
        model = tiny().attach_projector(6)
        metas.append(train_attempt(model, spec, cfg, tmp_path / run, stage="image", bank=bank))
    a, _ = load_model(tmp_path / "a")
    b, _ = load_model(tmp_path / "b")
    for k, v in a.state_dict().items():
        assert torch.equal(v, b.state_dict()[k]), k
    assert metas[0]["steps"] == 6 and os.path.exists(tmp_path / "a" / "metrics.parquet")
    batch = generate(spec, 4, np.random.default_rng(0), bank=bank, kind=RETRIEVAL)
    assert answer_logits(a, batch, "cpu", precision, bank=bank).shape == (4, a.cfg.vocab_size)


@pytest.mark.slow
def test_a_compiled_step_trains_the_eager_weights_up_to_rounding(tmp_path):
    """train.compile: the forward through torch.compile (the default mode off CUDA) trains what eager does, on
    packed batches of text and image prompts (the image features placed without data-dependent shapes). One block
    and one step: the compiler's time grows with the graph and every block is the same code, and a second batch
    with another number of images compiles the graph again (dynamic shapes), the same code once more."""
    from torch._dynamo.utils import counters
    bank = make_bank(tmp_path, "per_object", dim=6)
    spec = StageSpec(n_colors=8, n_shapes=13, n_items=8, min_objects=2, max_objects=2, image_fraction=0.5)
    cfg = TrainConfig(warmup_steps=2, batch_size=8, eval_every=1, val_size=16, max_steps=1, queries="all")
    start = tiny(n_layers=1).attach_projector(6).state_dict()
    eager = tiny(n_layers=1).attach_projector(6)
    train_attempt(eager, spec, cfg, tmp_path / "eager", stage="image", bank=bank)
    torch._dynamo.reset()
    counters.clear()
    compiled = tiny(n_layers=1).attach_projector(6)
    train_attempt(compiled, spec, replace(cfg, compile=True), tmp_path / "compiled", stage="image", bank=bank)
    # the whole forward compiled: no frame fell back to eager, nothing the compiler could not take
    assert counters["frames"]["ok"] == counters["frames"]["total"] >= 1 and not counters["unimplemented"]
    for k, v in eager.state_dict().items():
        assert not torch.equal(v, start[k]) or k == "rope_cis", k
        torch.testing.assert_close(compiled.state_dict()[k], v, rtol=1e-4, atol=1e-5)


def test_random_weight_encoders_are_seeded_and_leave_the_callers_rng_alone():
    """Two extractions of a bank must see the same random weights (else their features are unrelated)."""
    spec = EncoderSpec("resnet18", pretrained=False)
    torch.manual_seed(1)
    before = torch.rand(3)
    torch.manual_seed(1)
    a = load_encoder(spec).state_dict()
    assert torch.equal(torch.rand(3), before)  # the global stream continues as if nothing was drawn
    torch.manual_seed(2)
    b = load_encoder(spec).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("layout", ["per_object", "canvas"])
def test_bank_split_holds_renderings_out_of_training(layout, tmp_path):
    bank = make_bank(tmp_path, layout, **({"renderings": 4} if layout == "per_object" else {}))
    train, val = bank.split(0.25)
    rng = np.random.default_rng(0)
    if layout == "per_object":
        colors, shapes = np.repeat(np.arange(8), 13 * 50), np.tile(np.arange(13), 8 * 50)
        seen = {k: set(b.sample_object_images(colors, shapes, rng).tolist()) for k, b in (("t", train), ("v", val))}
        assert len(seen["v"]) == 8 * 13 and len(seen["t"]) == 3 * 8 * 13  # one of 4 renderings per pair held out
    else:
        n = np.full(2000, 4)
        seen = {k: set(b.sample_canvases(n, rng).tolist()) for k, b in (("t", train), ("v", val))}
        assert seen["v"] and min(seen["v"]) > max(seen["t"])  # the last quarter of the canvases
    assert not seen["t"] & seen["v"]
    assert bank.split(0.25)[0].features is bank.features  # views, not copies


def test_bank_split_needs_a_rendering_left_for_training(tmp_path):
    bank = make_bank(tmp_path, "per_object", renderings=1)
    with pytest.raises(ValueError, match="render.renderings"):
        bank.split(0.25)


def test_image_stage_validates_on_held_out_renderings_only(tmp_path, monkeypatch):
    import vlbind.training.loop as train

    bank = make_bank(tmp_path, "per_object", dim=6, renderings=4)
    shown = {"train": set(), "val": set()}
    real_generate, real_validation_set = train.generate, train.validation_set
    phase = ["train"]

    def generate(*args, **kwargs):
        b = real_generate(*args, **kwargs)
        shown[phase[0]] |= set(b.image_ids[b.image_ids >= 0].tolist())
        return b

    def validation_set(*args, **kwargs):
        phase[0] = "val"
        try:
            return real_validation_set(*args, **kwargs)
        finally:
            phase[0] = "train"

    monkeypatch.setattr(train, "generate", generate)
    monkeypatch.setattr(train, "validation_set", validation_set)
    spec = StageSpec(n_colors=8, n_shapes=13, n_items=8, max_objects=3, grounding_fraction=0.5, image_fraction=1.0)
    cfg = TrainConfig(warmup_steps=2, batch_size=16, eval_every=4, val_size=64, max_steps=8, target_accuracy=None)
    train.train_attempt(tiny().attach_projector(6), spec, cfg, tmp_path / "run", stage="image", bank=bank)
    assert shown["train"] and shown["val"] and not shown["train"] & shown["val"]
    held_out = set(bank.images_of[:, :, -1].ravel().tolist())  # val_images 0.25 of 4 renderings: the last one
    assert shown["val"] <= held_out


def test_a_missing_cairo_library_stops_rendering_naming_what_to_install(monkeypatch):
    import builtins

    from vlbind.data.render import MissingSystemLibrary

    real_import = builtins.__import__

    def no_cairo(name, *args, **kwargs):  # what cairocffi raises on a machine without libcairo
        if name == "cairosvg":
            raise OSError("no library called \"cairo-2\" was found")
        return real_import(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "cairosvg", raising=False)
    monkeypatch.setattr(builtins, "__import__", no_cairo)
    with pytest.raises(MissingSystemLibrary, match=r"cairo system library.*apt install libcairo2.*conda-forge cairo"):
        render([(0, 0, (10, 10, 50, 50))], size=64)


def test_extract_batch_size_sets_memory_only_the_features_equal_to_float16_rounding(tmp_path):
    """vision.extract_batch_size is out of the rule's params: any batch gives the same features (to the float16
    storage's rounding), here 1 and 3 images a pass against all 5 at once."""
    render_bank(RenderConfig(n_colors=2, renderings=1, size=64), tmp_path)
    spec = EncoderSpec(timm_name="vit_tiny_patch16_224", pretrained=False, grid=None)
    torch.manual_seed(0)
    model = __import__("timm").create_model("vit_tiny_patch16_224", pretrained=False, num_classes=0, img_size=64)
    feats = {}
    for size in (5, 1, 3):
        extract(spec, tmp_path / "images", 5, tmp_path / f"f{size}.npy", batch_size=size, model=model)
        feats[size] = np.load(tmp_path / f"f{size}.npy").astype(np.float32)
    for size in (1, 3):
        np.testing.assert_allclose(feats[size], feats[5], rtol=2e-3, atol=2e-3)

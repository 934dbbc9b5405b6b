"""Speed of the vision arm, measured side by side in one run. Prints tables; asserts nothing.

    python benchmarks/bench_vision.py [--threads 1] [--images 64] [--steps 8] [--encoders resnet152 ...]
                                      [--skip-extraction]

1. feature extraction: `vlbind.vision.encoders.extract` (PNG decode, normalise, forward, drop prefix tokens,
   float16 memmap write) vs a raw timm `forward_features` on the same, already decoded batches, for each
   default encoder of config/config.yaml with random weights (no hub here), fp32 and bf16 autocast;
2. one training step on image-context prompts (8 objects, one image per object) vs a text step (8
   objects), for the Table 2 model and the mini model (each with its config's projector width), with
   each encoder's full patch grid and pooled to 2x2 tokens per image.
Run it when nothing else runs: on a busy 2-core box timings are noise.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from vlbind.data.bank import ImageBank
from vlbind.data.render import RenderConfig, layout_objects, load_image, render_bank
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import IMAGE, TEXT, generate
from vlbind.model.inference import answer_logits
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.config import TrainConfig
from vlbind.training.optim import make_optimizer
from vlbind.vision.encoders import EncoderSpec, extract, load_encoder, normalizer, to_tensor

ROOT = Path(__file__).resolve().parents[1]
SPEC = StageSpec(n_colors=8, n_shapes=13, n_items=8, min_objects=8, max_objects=8, shuffle=True, symmetric_fraction=0.0)


def bench_extraction(name: str, spec: EncoderSpec, image_dir: Path, n: int, batch: int) -> list[str]:
    torch.manual_seed(0)
    model = load_encoder(spec)
    mean, std = normalizer(model)
    decoded = [to_tensor(np.stack([load_image(image_dir, i) for i in range(s, min(s + batch, n))]), mean, std)
               for s in range(0, n, batch)]
    rows = []
    for precision in ("fp32", "bf16"):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            model.forward_features(decoded[0][:2])  # warm-up
            t = time.perf_counter()
            for x in decoded:
                model.forward_features(x)
            raw = time.perf_counter() - t
        with tempfile.TemporaryDirectory() as tmp:
            t = time.perf_counter()
            index = extract(spec, image_dir, n, Path(tmp) / "f.npy", batch_size=batch, precision=precision,
                            model=model)
            ours = time.perf_counter() - t
        rows.append(f"| {name} | {precision} | {index['tokens_per_image']} x {index['dim']} | {n / raw:.1f} | "
                    f"{n / ours:.1f} | {raw / ours:.2f}x |")
    return rows


def step_seconds(model, batches, bank, steps: int) -> float:
    opt = make_optimizer(model, TrainConfig(lr=1e-4))
    times = []
    for i, b in enumerate(batches[: steps + 2]):
        t = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(answer_logits(model, b, "cpu", bank=bank), torch.from_numpy(b.target))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t)
    return float(np.median(times))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--images", type=int, default=64)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--encoders", nargs="*", default=None)
    ap.add_argument("--skip-extraction", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    config = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    mini = yaml.safe_load((ROOT / "config" / "mini.yaml").read_text())
    names = args.encoders or config["vision"]["encoders"]
    specs = {n: EncoderSpec.from_dict({**config["encoders"][n], "pretrained": False}) for n in names}
    print(f"threads={args.threads} torch={torch.__version__} random-weight encoders, 224x224 renderings")

    with tempfile.TemporaryDirectory() as tmp:
        cfg = RenderConfig(variants=1)  # 8 colors x 13 shapes = 104 images
        render_bank(cfg, Path(tmp))
        n = min(args.images, 104)
        print(f"\nfeature extraction, {n} images, batch {args.batch}:\n"
              "| encoder | precision | tokens x dim | raw forward_features (img/s) | vlbind extract (img/s) | ratio |\n"
              "|---|---|---|---|---|---|")
        for name in [] if args.skip_extraction else names:
            print("\n".join(bench_extraction(name, specs[name], Path(tmp) / "images", n, args.batch)), flush=True)

    objects = layout_objects(RenderConfig(variants=1))
    rng = np.random.default_rng(0)
    print("\ntraining step, 8 objects, batch 32, fp32 (image: one image per object):\n"
          "| model | projector mult | context | tokens/image | image dim | prompt length | s/step | image / text |\n"
          "|---|---|---|---|---|---|---|---|")
    scales = (("Table 2", ModelConfig(), config["projector"]["mult"]),
              ("mini", ModelConfig(**mini["model"]), mini["projector"]["mult"]))
    for label, mcfg, mult in scales:
        torch.manual_seed(0)
        text_model = Transformer(mcfg)
        text_batches = [generate(SPEC, 32, rng, modality=TEXT) for _ in range(args.steps + 2)]
        t_text = step_seconds(text_model, text_batches, None, args.steps)
        print(f"| {label} | - | text | - | - | {text_batches[0].tokens.shape[1]} | {t_text:.3f} | 1.00x |", flush=True)
        for name in names:
            dims = {"resnet152": (49, 2048)}.get(name, (196, 768))
            for tokens in (dims[0], 4):
                feats = np.random.default_rng(1).standard_normal((104, tokens, dims[1])).astype(np.float16)
                bank = ImageBank("per_object", objects, feats, {})
                torch.manual_seed(0)
                model = Transformer(mcfg).attach_projector(dims[1], mult=mult)
                batches = [generate(SPEC, 32, rng, modality=IMAGE, bank=bank) for _ in range(args.steps + 2)]
                t = step_seconds(model, batches, bank, args.steps)
                print(f"| {label} | {mult} | image ({name}) | {tokens} | {dims[1]} | {batches[0].tokens.shape[1]} | "
                      f"{t:.3f} | {t / t_text:.2f}x |", flush=True)


if __name__ == "__main__":
    main()

"""What a frozen encoder's features carry: linear probes for color and shape on held-out renderings.

    python benchmarks/bench_encoder_probes.py [--config config/config.yaml config/mini.yaml] [--random]

For each encoder of the config's `vision.encoders` whose feature bank the DAG has written
(results/features/{encoder}/{layout}.npy), and with --random also for random-weight ResNet-152 and ViT-B/16
(extracted here, on the same bank), fits the interp probes' ridge classifier on the features of every image (tokens
concatenated) and scores it on renderings it never saw: the bank's held-out quarter, exactly the renderings
image-stage validation shows (ImageBank.split). Also prints the mean pairwise cosine of the images'
features (1.0 = every image looks the same to the encoder). Chance: 1/8 for color, 1/13 for shape.
Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch

from vlbind import config as vlconfig
from vlbind.core.device import precision_for
from vlbind.data.bank import ImageBank
from vlbind.interp.probes import fit_and_score
from vlbind.vision.encoders import EncoderSpec, extract

RANDOM = {"resnet152 (random)": {"timm_name": "resnet152", "pretrained": False, "grid": 2},
          "vit_b16 (random)": {"timm_name": "vit_base_patch16_224", "pretrained": False, "grid": 2}}


def probe(bank: ImageBank) -> dict:
    train, val = bank.split(0.25)
    ids = {k: b.images_of.reshape(-1, b.images_of.shape[2]) for k, b in (("train", train), ("val", val))}
    n_shapes = bank.images_of.shape[1]
    out = {}
    x = np.asarray(bank.features, dtype=np.float32).reshape(len(bank.features), -1)
    for attr, label in (("color", lambda pair: pair // n_shapes), ("shape", lambda pair: pair % n_shapes)):
        split = {k: (np.concatenate([x[v[:, j]] for j in range(v.shape[1])]),
                     np.tile(label(np.arange(len(v))), v.shape[1])) for k, v in ids.items()}
        (x_tr, y_tr), (x_te, y_te) = split["train"], split["val"]
        out[attr] = float(fit_and_score(x_tr[None], y_tr, x_te[None], y_te)[0][0])  # the interp probes' ridge
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = unit @ unit.T
    out["cosine"] = float(cos[~np.eye(len(x), dtype=bool)].mean())
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", nargs="+", default=["config/config.yaml", "config/mini.yaml"])
    p.add_argument("--random", action="store_true", help="also random-weight ResNet-152 and ViT-B/16")
    args = p.parse_args()
    torch.set_num_threads(1)
    cfg = vlconfig.load(args.config)
    layout = cfg["render"]["layout"]
    bank_dir = Path(f"results/banks/{layout}")
    rows = {}
    for name in cfg["vision"]["encoders"]:
        path = Path(f"results/features/{name}/{layout}.npy")
        if path.is_file():
            rows[name] = probe(ImageBank.open(bank_dir, path))
        else:
            print(f"skipped {name}: {path} missing (run the DAG to extract it)")
    if args.random:
        import pandas as pd

        objects = pd.read_parquet(bank_dir / "objects.parquet")
        n_images, size = int(objects["image"].max()) + 1, int(objects["image_size"].iloc[0])
        with tempfile.TemporaryDirectory() as tmp:
            for name, spec in RANDOM.items():
                out = Path(tmp) / f"{len(rows)}.npy"
                kwargs = {"model_kwargs": {"img_size": size}} if "vit" in spec["timm_name"] else {}
                extract(EncoderSpec.from_dict({**spec, **kwargs}), bank_dir / "images", n_images, out,
                        batch_size=cfg["vision"]["extract_batch_size"], precision=precision_for({"cpu": "auto"}, "cpu"))
                rows[name] = probe(ImageBank.open(bank_dir, out))
    print("| encoder | color probe | shape probe | mean pairwise cosine |\n|---|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['color']:.3f} | {r['shape']:.3f} | {r['cosine']:.3f} |")


if __name__ == "__main__":
    main()

"""Side experiment (not in the DAG): does a gradual length curriculum (2..3, then 2..4, ... 2..8 pairs,
fixed order, 8 items, 216 colors/shapes) get the mini model past the text_s3 wall that "2..8 at once"
hits? Each step trains until 95 % validation accuracy (cap `--cap` steps) and starts from the last.

    python docs/results/mini/experiments/gradual_length.py results/models/seed0/text_s2 /tmp/gradual \
        [--cap 20000] [--budget 2400]
"""
import argparse
import logging
import sys
import time
from pathlib import Path

import torch

from vlbind.checkpoint import load_model
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig, train_stage

ap = argparse.ArgumentParser()
ap.add_argument("start")
ap.add_argument("out")
ap.add_argument("--cap", type=int, default=20000)
ap.add_argument("--budget", type=float, default=2400, help="seconds; no new length step starts after it")
ap.add_argument("--first", type=int, default=3, help="first max_pairs")
args = ap.parse_args()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(message)s")
torch.set_num_threads(1)
model, _ = load_model(args.start)
t0 = time.time()
for hi in range(args.first, 9):
    spec = StageSpec(n_colors=216, n_shapes=216, n_items=8, min_pairs=2, max_pairs=hi, shuffle=False)
    cfg = TrainConfig(lr=1e-3, warmup_steps=100, eval_every=250, val_size=512, target_accuracy=0.95,
                      patience=1000, max_steps=args.cap, seed=0)
    meta = train_stage(model, spec, cfg, Path(args.out) / f"max{hi}", stage=f"s3_max{hi}")
    print(f"RESULT max_pairs={hi}: {meta['stopped_because']} steps={meta['steps']} "
          f"best={meta['best_val_accuracy']:.3f} elapsed={time.time() - t0:.0f}s", flush=True)
    if meta["best_val_accuracy"] < 0.95 or time.time() - t0 > args.budget:
        break

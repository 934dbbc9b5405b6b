"""Side experiment (now the mini text_s4 recipe): shuffled retrieval (text_s4's distribution: 216 colors
and shapes, 8 items, 2..8 objects, shuffled association list) with one-hop practice prompts mixed in:
StageSpec.hop_fraction (half feature grounding, color -> its shape; half association lookup, shape -> its
item). Validation and the length ramp judge shuffled retrieval only. lr 1e-3, 100-step warm-up, one core.

    python docs/results/mini/experiments/one_hop_practice.py START OUT [--hops 0.667] [--cap STEPS]

START is a model directory, e.g. results/models/seed1/text_s3. The first run of this experiment (H1,
from seed 1's text_s3) drew the same task shares through a patched generator before hop_fraction existed.
"""

import argparse
import logging
import sys
from pathlib import Path

import torch

from vlbind.checkpoint import load_model
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig, train_stage

ap = argparse.ArgumentParser()
ap.add_argument("start")
ap.add_argument("out")
ap.add_argument("--hops", type=float, default=0.667, help="share of one-hop practice prompts (training only)")
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--cap", type=int, default=60000)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(message)s")
torch.set_num_threads(1)
torch.manual_seed(a.seed)
model, _ = load_model(a.start)
spec = StageSpec(n_colors=216, n_shapes=216, n_items=8, min_pairs=2, max_pairs=8, shuffle=True, hop_fraction=a.hops)
cfg = TrainConfig(lr=a.lr, warmup_steps=100, eval_every=250, val_size=512, target_accuracy=0.95,
                  ramp_target=0.95, patience=1000, max_steps=a.cap, seed=a.seed)
meta = train_stage(model, spec, cfg, Path(a.out), stage="experiment")
print(f"RESULT {meta['stopped_because']} steps={meta['steps']} reached 2..{meta['max_pairs_reached']} "
      f"best={meta['best_val_accuracy']:.3f}", flush=True)

"""Side experiments (not in the DAG): can the mini model (6 layers, d 64) learn text_s4's shuffled
association order, the wall after the length ramp solved text_s3? Each run trains one stage-like
distribution (216 colors and shapes, 8 items, 2..8 objects) with the trainer's length ramp (start at 2
objects, one more at 95 % validation), lr 1e-3, 100-step warm-up, from a checkpoint or from scratch.

    python docs/results/mini/experiments/shuffled_order.py START OUT [--shuffle] [--grounding F] [--hops F]
        [--cap STEPS]

START is a model directory (e.g. results/models/seed0/text_s3) or `scratch` (a fresh mini model, then
the text_s1 vocabulary: 8 colors, 8 shapes, 2 objects). --grounding F mixes a share F of feature-grounding
prompts (query a color, answer its shape) in. --hops F sets StageSpec.hop_fraction, training-only one-hop
practice (now the mini text_s4 recipe: `--shuffle --hops 0.667` from results/models/seed1/text_s3; its first
run drew the same task shares through a patched generator before hop_fraction existed). --deepen AT N inserts
N identity-initialised blocks before block AT of the START model (same function, more depth to train).
"""
import argparse
import dataclasses
import logging
import re
import sys
from pathlib import Path

import torch

from vlbind.checkpoint import load_model
from vlbind.model import ModelConfig, Transformer
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig, train_stage


def deepen(model: Transformer, at: int, n: int) -> Transformer:
    """The same function with n more blocks: new blocks before block `at`, their residual outputs zeroed."""
    cfg = dataclasses.replace(model.cfg, n_layers=model.cfg.n_layers + n)
    deeper = Transformer(cfg)
    old = model.state_dict()
    new = {}
    for key, value in deeper.state_dict().items():
        m = re.match(r"blocks\.(\d+)\.(.*)", key)
        if m is None:
            new[key] = old[key]
            continue
        i, rest = int(m[1]), m[2]
        if i < at:
            new[key] = old[key]
        elif i >= at + n:
            new[key] = old[f"blocks.{i - n}.{rest}"]
        else:
            new[key] = torch.zeros_like(value) if rest in ("attn.out.weight", "mlp.down.weight") else value
    deeper.load_state_dict(new)
    return deeper


ap = argparse.ArgumentParser()
ap.add_argument("start")
ap.add_argument("out")
ap.add_argument("--shuffle", action="store_true", help="association list in random order (text_s4)")
ap.add_argument("--grounding", type=float, default=0.0, help="share of feature-grounding prompts")
ap.add_argument("--hops", type=float, default=0.0, help="share of one-hop practice prompts (training only)")
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--cap", type=int, default=40000)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--deepen", type=int, nargs=2, metavar=("AT", "N"),
                help="insert N identity-initialised blocks before block AT (zeroed attention and MLP outputs)")
a = ap.parse_args()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(message)s")
torch.set_num_threads(1)
torch.manual_seed(a.seed)
if a.start == "scratch":
    model = Transformer(ModelConfig(n_layers=6, d_model=64, d_ff=256, n_heads=4))
    spec = StageSpec(n_colors=8, n_shapes=8, n_items=8, min_pairs=2, max_pairs=2, shuffle=a.shuffle,
                     grounding_fraction=a.grounding, hop_fraction=a.hops)
else:
    model, _ = load_model(a.start)
    if a.deepen:
        model = deepen(model, *a.deepen)
    spec = StageSpec(n_colors=216, n_shapes=216, n_items=8, min_pairs=2, max_pairs=8, shuffle=a.shuffle,
                     grounding_fraction=a.grounding, hop_fraction=a.hops)
cfg = TrainConfig(lr=a.lr, warmup_steps=100, eval_every=250, val_size=512, target_accuracy=0.95,
                  ramp_target=0.95, patience=1000, max_steps=a.cap, seed=a.seed)
meta = train_stage(model, spec, cfg, Path(a.out), stage="experiment")
print(f"RESULT {meta['stopped_because']} steps={meta['steps']} reached 2..{meta['max_pairs_reached']} "
      f"best={meta['best_val_accuracy']:.3f}", flush=True)

"""Shuffled retrieval (text_s4) with both hops trained alongside: a share of feature grounding (hop 1:
color -> its shape) and of association lookup (hop 2: query a shape, answer its item). Validation and the
ramp judge shuffled retrieval only."""
import argparse, logging, sys
from dataclasses import replace
from pathlib import Path
import numpy as np, torch
import vlbind.train as T
from vlbind.checkpoint import load_model
from vlbind.tasks import StageSpec, RETRIEVAL

ap = argparse.ArgumentParser()
ap.add_argument("start"); ap.add_argument("out")
ap.add_argument("--grounding", type=float, default=1/3)
ap.add_argument("--lookup", type=float, default=0.5, help="share of retrieval prompts turned into lookups")
ap.add_argument("--lr", type=float, default=1e-3)
ap.add_argument("--cap", type=int, default=60000)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--min-pairs", type=int, default=2)
a = ap.parse_args()
logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(message)s")
torch.set_num_threads(1); torch.manual_seed(a.seed)
orig = T.generate
def gen(spec, bs, rng, **kw):
    if bs != 32:
        return orig(spec, bs, rng, **kw)          # validation: shuffled retrieval only
    b = orig(replace(spec, grounding_fraction=a.grounding), bs, rng, **kw)
    lk = (b.task == RETRIEVAL) & (rng.random(bs) < a.lookup)
    rows = np.where(lk)[0]
    b.tokens[rows, b.answer_pos[rows] - 1] = b.shapes[rows, b.query_slot[rows]]
    return b
T.generate = gen
model, _ = load_model(a.start)
spec = StageSpec(n_colors=216, n_shapes=216, n_items=8, min_pairs=a.min_pairs, max_pairs=8, shuffle=True)
cfg = T.TrainConfig(lr=a.lr, warmup_steps=100, eval_every=250, val_size=512, target_accuracy=0.95,
                    ramp_target=0.95, patience=1000, max_steps=a.cap, seed=a.seed)
meta = T.train_stage(model, spec, cfg, Path(a.out), stage="experiment")
print(f"RESULT {meta['stopped_because']} steps={meta['steps']} reached 2..{meta['max_pairs_reached']} "
      f"best={meta['best_val_accuracy']:.3f}", flush=True)

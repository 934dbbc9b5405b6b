"""Where a model fails on retrieval: per number of objects, its accuracy on each hop alone (feature
grounding color -> shape, association lookup shape -> item, the solo-context lookup keyed by the shape of the
one context pair: StageSpec.solo_fraction) and on the composed retrieval, and what its
wrong retrieval answers are (the item at the query's context index = the positional shortcut, another
prompt item, or no item of the prompt), then retrieval accuracy by the queried object's context slot.
400 prompts per length, 216 colors and shapes, 8 items.

    python docs/results/mini/experiments/error_analysis.py MODEL_DIR [--fixed] [--max-objects 8] [--resume FILE]

--resume reads the current weights of a running stage from its resume.safetensors (MODEL_DIR: any model
of the same architecture, e.g. the stage's parent).
"""
import _model_args
import numpy as np
import torch

from vlbind.tasks import BY_COLOR, GROUNDING, LOOKUP, RETRIEVAL, SOLO, StageSpec, generate
from vlbind.train import answer_logits

ap = _model_args.parser(__doc__)
ap.add_argument("--max-objects", type=int, default=8)
a = ap.parse_args()
model = _model_args.load(a)
spec = StageSpec(n_colors=216, n_shapes=216, n_items=8, min_pairs=2, max_pairs=8, shuffle=not a.fixed)


def predict(n: int, task: int):
    b = generate(spec, 400, np.random.default_rng([n, task]), n_pairs=n, task=task, query_by=BY_COLOR, noise=False)
    with torch.no_grad():
        return b, answer_logits(model, b, "cpu").argmax(-1).numpy()


print("objects  grounding  lookup  solo  retrieval | wrong retrieval answers: positional  other item  no item")
by_slot = []
for n in range(2, a.max_objects + 1):
    hops = [(pred == b.target).mean() for b, pred in (predict(n, GROUNDING), predict(n, LOOKUP), predict(n, SOLO))]
    b, pred = predict(n, RETRIEVAL)
    rows = np.arange(len(b))
    wrong = pred != b.target
    positional = b.items[rows, b.association_order[rows, b.query_slot]]  # item listed at the query's index
    in_prompt = (pred[:, None] == b.items[:, :n]).any(1)
    print(f"{n:7d}  {hops[0]:9.3f}  {hops[1]:6.3f}  {hops[2]:4.3f}  {1 - wrong.mean():9.3f} | "
          f"{(wrong & (pred == positional)).mean():31.3f}  {(wrong & in_prompt & (pred != positional)).mean():10.3f}"
          f"  {(~in_prompt).mean():7.3f}")
    by_slot.append(f"{n:7d}  " + " ".join(f"{(~wrong)[b.query_slot == s].mean():.2f}" for s in range(n)))

print("\nretrieval accuracy by the queried object's context slot (0 = first pair)")
print("\n".join(by_slot))

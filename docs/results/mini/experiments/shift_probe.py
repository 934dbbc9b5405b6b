"""Does a model find the queried object by content or by its distance from the query? Accuracy on feature
grounding (color -> shape) and retrieval (color -> item) when the query block ([QUESTION] query [ANSWER]) is
moved k positions further from the rest of the prompt. Only the RoPE position ids move, as an unattendable
gap would move them (appendix D.4); the tokens stay. Attention by content is blind to such a shift up to
the distances RoPE still resolves; a lookup at a learnt distance is not. 400 prompts per length, 216 colors
and shapes, 8 items, queried by color.

    python docs/results/mini/experiments/shift_probe.py MODEL_DIR [--fixed] [--resume FILE]

--fixed: association list in context order (stages 1-3); --resume reads the current weights of a running
stage (MODEL_DIR: any model of the same architecture).
"""
import _model_args
import numpy as np
import torch

from vlbind.tasks import BY_COLOR, GROUNDING, RETRIEVAL, Role, StageSpec, generate
from vlbind.train import answer_logits

SHIFTS = (0, 1, 2, 3, 6, 12, 30)
a = _model_args.parser(__doc__).parse_args()
model = _model_args.load(a)
spec = StageSpec(n_colors=216, n_shapes=216, n_items=8, shuffle=not a.fixed)

print("task       objects  " + " ".join(f"k={k:<3d}" for k in SHIFTS))
for task, name in ((GROUNDING, "grounding"), (RETRIEVAL, "retrieval")):
    for n in (2, 3, 4, 5, 6, 8):
        batch = generate(spec, 400, np.random.default_rng([n, task]), n_pairs=n, task=task, query_by=BY_COLOR)
        query_block = np.isin(batch.roles, [Role.QUESTION, Role.QUERY, Role.ANSWER])
        plain, accuracy = batch.positions, []
        for k in SHIFTS:
            batch.positions = plain + k * query_block
            with torch.no_grad():
                accuracy.append((answer_logits(model, batch, "cpu").argmax(-1).numpy() == batch.target).mean())
        print(f"{name:10s} {n:7d}  " + " ".join(f"{x:5.2f}" for x in accuracy), flush=True)

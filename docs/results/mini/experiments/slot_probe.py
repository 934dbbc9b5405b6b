"""Which object slot (its index in the context) a model carries where: the linear probes of the DAG's
`probes` analysis (appendix G.1), attribute `slot` only, on prompts of a chosen length range and order, so
that models of any curriculum stage can be compared on the prompts they were trained on.

    python docs/results/mini/experiments/slot_probe.py MODEL_DIR [--max-objects 8] [--fixed] [--resume FILE]

e.g. `... results/models/seed1/text_s3 --max-objects 3 --fixed`. --resume reads the current weights of a
running stage (MODEL_DIR: any model of the same architecture, e.g. the stage's parent). Prints accuracy per
role (rows) and layer (columns, 0 = embeddings) and the chance level (the majority slot).
"""
import argparse
import dataclasses

import torch

from vlbind.checkpoint import load_model
from vlbind.interp import knockout, probes
from vlbind.train import resume_weights

ap = argparse.ArgumentParser()
ap.add_argument("model")
ap.add_argument("--max-objects", type=int, default=8)
ap.add_argument("--fixed", action="store_true", help="association list in context order (stages 1-3)")
ap.add_argument("--resume", help="a running stage's resume.safetensors: its current weights")
a = ap.parse_args()
torch.set_num_threads(1)
model, _ = load_model(a.model)
if a.resume:
    model.load_state_dict(resume_weights(a.resume))
spec = dataclasses.replace(knockout.ANALYSIS_SPEC, max_pairs=a.max_objects, shuffle=not a.fixed)
cfg = probes.ProbeConfig(seed=13)  # config.yaml's analyses.probes seed: the DAG's probe prompts at 2..8
probes.analysis_prompts = lambda n, seed: knockout.analysis_prompts(n, seed, spec=spec)
table = probes.probe_table(model, cfg)
table = table[table.attribute == "slot"]
print(table.pivot(index="role", columns="layer", values="accuracy").round(2).to_string())
print(f"chance {table.chance.iloc[0]:.3f}")

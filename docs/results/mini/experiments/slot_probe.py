"""Which object slot (its index in the context) a model carries where: the linear probes of the DAG's
`probes` analysis (appendix G.1), attribute `slot` only, on prompts of a chosen length range and order, so
that models of any curriculum stage can be compared on the prompts they were trained on.

    python docs/results/mini/experiments/slot_probe.py MODEL_DIR [--max-objects 8] [--fixed] [--resume FILE]

e.g. `... results/models/seed1/text_s3 --max-objects 3 --fixed`. --resume reads the current weights of a
running stage (MODEL_DIR: any model of the same architecture, e.g. the stage's parent). Prints accuracy per
role (rows) and layer (columns, 0 = embeddings) and the chance level (the majority slot).
"""
import dataclasses

import _model_args

from vlbind.interp import knockout, probes

ap = _model_args.parser(__doc__)
ap.add_argument("--max-objects", type=int, default=8)
a = ap.parse_args()
model = _model_args.load(a)
spec = dataclasses.replace(knockout.ANALYSIS_SPEC, max_pairs=a.max_objects, shuffle=not a.fixed)
cfg = probes.ProbeConfig(seed=13)  # config.yaml's analyses.probes seed: the DAG's probe prompts at 2..8
probes.analysis_prompts = lambda n, seed: knockout.analysis_prompts(n, seed, spec=spec)
table = probes.probe_table(model, cfg)
table = table[table.attribute == "slot"]
print(table.pivot(index="role", columns="layer", values="accuracy").round(2).to_string())
print(f"chance {table.chance.iloc[0]:.3f}")

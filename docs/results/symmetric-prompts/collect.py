"""Issue 78's measurement: half of text_s2's and text_s3's prompts queried by shape against none, from the same text_s1
parents, at mini, 4 seeds. Reads the arms' meta.json and writes this folder's tables with the DAG's own functions
(vlbind.evaluation.tables.unit_outcomes and seed_table, as the seed_table rule):

    python docs/results/symmetric-prompts/collect.py --none RESULTS... --half RESULTS...

per_seed.csv: one row per arm, seed and unit (pass, first attempt, attempts, steps, best validation accuracy);
seed_table.csv: per arm and unit over the seeds (pass fractions, median and max steps to target).
"""
import argparse
from pathlib import Path

import pandas as pd

from vlbind.evaluation import tables

STAGES = ["text_s1", "text_s2", "text_s3"]
OUT = Path(__file__).resolve().parent

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--none", nargs="+", type=Path, required=True, help="results/ folders of the default arm (none)")
ap.add_argument("--half", nargs="+", type=Path, required=True, help="results/ folders of the half arm")
args = ap.parse_args()

per_seed, seed_tables = [], []
for arm, folders in (("none", args.none), ("half", args.half)):
    metas = sorted(p for d in folders for s in STAGES for p in d.glob(f"models/seed*/{s}/meta.json"))
    units = tables.unit_outcomes(metas).assign(arm=arm)
    if units.duplicated(["run", "unit"]).any():
        raise SystemExit(f"{arm}: a seed's stage in two of the folders {', '.join(map(str, folders))}")
    per_seed.append(units)
    seed_tables.append(tables.seed_table(units, STAGES).assign(arm=arm))
pd.concat(per_seed)[["arm", "run", "unit", "passed", "first_attempt", "attempts", "steps", "best_val_accuracy",
                     "bar"]].to_csv(OUT / "per_seed.csv", index=False)
table = pd.concat(seed_tables)
table[["arm"] + [c for c in table if c != "arm"]].to_csv(OUT / "seed_table.csv", index=False)
print(table.to_string(index=False))

"""Copy a finished mini run's tables and figures from results/ into docs/results/mini/ (tracked in git).

    python docs/results/mini/export.py

Figures (results/figures/*.pdf) and the DAG's tables (results/tables/*.csv) are copied, fig3 is drawn once
more as fig3.png for README.md; the per-run
parquet files are concatenated into eval_by_length.csv and one CSV per analysis that ran; job_wall_times.csv
lists every job's Snakemake benchmark (wall seconds).
"""
import shutil
from pathlib import Path

import pandas as pd

from vlbind import captions, config, figures

ROOT = Path(__file__).resolve().parents[3]
RESULTS, OUT = ROOT / "results", Path(__file__).resolve().parent


def concat(pattern: str) -> pd.DataFrame | None:
    files = sorted(RESULTS.glob(pattern))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True) if files else None


for path in sorted((RESULTS / "figures").glob("*.pdf")) + sorted((RESULTS / "tables").glob("*.csv")):
    shutil.copyfile(path, OUT / path.name)
if (table := concat("eval/*/*.parquet")) is None:
    raise SystemExit("no results/eval/*/*.parquet: run the mini DAG first")
table.to_csv(OUT / "eval_by_length.csv", index=False)
mini = config.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
figures.fig3(table, OUT / "fig3.png", captions.figure_note(mini))  # the footnote rule fig3 gives it
for kind in ("interchange", "knockout", "probes", "layer_relevance"):  # a text-arm-only run has none
    if (table := concat(f"interp/{kind}/*/*.parquet")) is not None:
        table.to_csv(OUT / f"{kind}.csv", index=False)
bench = RESULTS / "benchmarks"
rows = [{"job": str(p.relative_to(bench).with_suffix("")), "rule": p.relative_to(bench).parts[0],
         "seconds": pd.read_csv(p, sep="\t")["s"].iloc[0]} for p in sorted(bench.rglob("*.tsv"))]
pd.DataFrame(rows).to_csv(OUT / "job_wall_times.csv", index=False)
print(f"exported to {OUT.relative_to(ROOT)}")

"""Copy a mini run's tables and figures from results/ into docs/results/mini/ (tracked in git).

    python docs/results/mini/export.py [--results DIR/results] [--out DIR]

Figures (results/figures/*.pdf) and the DAG's tables (results/tables/*.csv, tables/seeds/, figures/seeds/) are
copied, fig3 is drawn once more as fig3.png for README.md; the per-run parquet files are concatenated into
eval_by_length.csv and one CSV per analysis that ran; job_wall_times.csv lists every finished job's Snakemake
benchmark (wall seconds). A run still in progress exports what has finished: training.csv from the finished stages'
meta.json (tables.training_summary, as the training_table rule), the evaluations and analyses that ran, the job
times; fig3.png only once the DAG has drawn fig3. scheduler_runs.csv lists the working directory's Snakemake runs
(tables.scheduler_runs: when each started and ended, read from Snakemake's own logs), the run's wall.
"""
import argparse
import shutil
from pathlib import Path

import pandas as pd

from vlbind import captions, config, figures
from vlbind.evaluation import tables

ROOT = Path(__file__).resolve().parents[3]
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--results", type=Path, default=ROOT / "results", help="the run's results/ (default: this tree's)")
ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent)
args = ap.parse_args()
RESULTS, OUT = args.results, args.out
OUT.mkdir(parents=True, exist_ok=True)


def concat(pattern: str) -> pd.DataFrame | None:
    files = sorted(RESULTS.glob(pattern))
    return pd.concat([pd.read_parquet(f) for f in files], ignore_index=True) if files else None


bench = RESULTS / "benchmarks"
rows = [{"job": str(p.relative_to(bench).with_suffix("")), "rule": p.relative_to(bench).parts[0],
         "seconds": pd.read_csv(p, sep="\t")["s"].iloc[0]} for p in sorted(bench.rglob("*.tsv"))]
pd.DataFrame(rows).to_csv(OUT / "job_wall_times.csv", index=False)
if (logs := RESULTS.parent / ".snakemake/log").is_dir():  # results/ sits in the working directory
    tables.scheduler_runs(logs).to_csv(OUT / "scheduler_runs.csv", index=False)
for kind in ("figures", "tables"):
    for path in sorted((RESULTS / kind).rglob("*.pdf" if kind == "figures" else "*.csv")):
        (OUT / path.relative_to(RESULTS / kind)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, OUT / path.relative_to(RESULTS / kind))
if not (RESULTS / "tables/training.csv").is_file():  # a run in progress: its finished stages
    metas = sorted(RESULTS.glob("models/*/*/meta.json"))
    tables.training_summary(metas).to_csv(OUT / "training.csv", index=False)
    print(f"run in progress: {len(metas)} finished stages in {OUT}/training.csv")
if (table := concat("eval/*/*.parquet")) is not None:
    table.to_csv(OUT / "eval_by_length.csv", index=False)
    if (RESULTS / "figures/fig3.pdf").is_file():  # the DAG drew fig3 (every variant evaluated): README's copy
        mini = config.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
        figures.fig3(table, OUT / "fig3.png", captions.figure_note(mini))  # the footnote rule fig3 gives it
for kind in ("interchange", "knockout", "probes", "layer_relevance"):  # a text-arm-only run has none
    if (table := concat(f"interp/{kind}/*/*.parquet")) is not None:
        table.to_csv(OUT / f"{kind}.csv", index=False)
print(f"exported to {OUT}: {len(rows)} job times")

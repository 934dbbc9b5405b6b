"""Where a read-out job's seconds go: the interpreter's start, Snakemake's `script:` preamble, the adapter's imports,
loading the model, and the work (each analysis, the evaluation), for one trained model. Each part is timed in a
fresh process, as a job would run it, the work in the order the jobs run it. Prints a table; asserts nothing.

    python benchmarks/bench_job_overhead.py MODEL_DIR [--config config/config.yaml config/smoke.yaml]
    python benchmarks/bench_job_overhead.py results/models/seed0/text_s5 --config config/config.yaml config/mini.yaml

MODEL_DIR is a stage's directory (model.safetensors, meta.json); the analyses' and the evaluation's settings come
from the configs given (the tree's own).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

# The child: timestamps after each part, as JSON on stdout. Run with -c, so that the interpreter's start is the
# time from the parent's launch to the child's first statement.
CHILD = r"""
import time; t = {"start": time.time()}
import pickle
from snakemake.iocontainers import Snakemake
from snakemake.logging import logger
t["snakemake preamble"] = time.time()
import torch, pandas, pyarrow.parquet
t["torch, pandas, pyarrow"] = time.time()
from vlbind import config as vlconfig
from vlbind.model.checkpoint import load_model
from vlbind.core.device import job_device
from vlbind.evaluation.evaluate import EvalConfig, evaluate
from vlbind.interp import ANALYSES, _module, analyze, settings
from vlbind.core.settings import from_dict
for a in ANALYSES:
    _module(a)
t["vlbind (analyses, evaluation)"] = time.time()
import json, sys
model_dir, configs = sys.argv[1], sys.argv[2:]
cfg = vlconfig.load(configs)
device, precision = job_device(cfg["device"], 1, cfg["precision"])
model, _ = load_model(model_dir, device)
t["model load"] = time.time()
for a in ANALYSES:
    analyze(a, model, settings(a, cfg["interp"][a]), device, cfg["interp"]["order"], precision)
    t[f"work: {a}"] = time.time()
evaluate(model, from_dict(EvalConfig, cfg["evaluate"]), device, precision)
t["work: evaluation"] = time.time()
print(json.dumps(t))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("--config", nargs="+", default=["config/config.yaml", "config/smoke.yaml"])
    ap.add_argument("--repeats", type=int, default=3, help="fresh processes; the table shows the median of each part")
    args = ap.parse_args()
    parts: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        launch = time.time()
        out = subprocess.run([sys.executable, "-c", CHILD, args.model_dir, *args.config],
                             capture_output=True, text=True, check=True).stdout
        stamps = json.loads(out.strip().splitlines()[-1])
        previous = launch
        for name, at in stamps.items():
            parts.setdefault("interpreter start" if name == "start" else name, []).append(at - previous)
            previous = at
        parts.setdefault("total (one process)", []).append(previous - launch)
    print(f"| part ({args.model_dir}; median of {args.repeats} processes) | seconds |")
    print("|---|---|")
    for name, values in parts.items():
        print(f"| {name} | {sorted(values)[len(values) // 2]:.2f} |")


if __name__ == "__main__":
    main()

"""What Snakemake's scheduler process spends while ready jobs wait for a core, after N jobs have finished. Snakemake
9's rate limiter (`--max-jobs-per-timespan`, default 100/1s) makes every pass of the scheduler's loop that finds
ready jobs it cannot start arm a timer for one more pass a timespan later, and each job that finishes starts such a
pass: the timers pile up, one per finished job, each waking the loop once a timespan (snakemake/snakemake#3744,
#200). A toy workflow on one core: N quick jobs, then three long ones (two of them wait, ready); the scheduler's CPU
seconds over 20 s of that wait, per N and per snakemake arguments. Prints a table; asserts nothing.

    python benchmarks/bench_scheduler_timers.py                                   # 1, 20, 80 jobs, the default
    python benchmarks/bench_scheduler_timers.py --args="--max-jobs-per-timespan 1000/10s"
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

SNAKEFILE = """
N = int(config["count"])
rule all:
    input: expand("long{j}.done", j=range(3))
rule quick:
    output: "q/{i}.txt"
    shell: "sleep 0.3; touch {output}"
rule long:
    input: expand("q/{i}.txt", i=range(N))
    output: "long{j}.done"
    shell: "sleep 25; touch {output}"
"""

# The scheduler's process: snakemake's command line, and a thread that reads the process's own CPU time from one
# second after the N quick jobs are done to 20 s later (the three long jobs are sleeps: their CPU is not in it)
CHILD = r"""
import os, resource, runpy, sys, threading, time
n, args = int(sys.argv[1]), sys.argv[2:]
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def watch():
    while not os.path.isdir("q") or len(os.listdir("q")) < n:
        time.sleep(0.05)
    time.sleep(1.0)
    c0 = cpu()
    time.sleep(20)
    print(f"RESULT {cpu() - c0:.2f} {threading.active_count()}", file=sys.__stderr__, flush=True)
threading.Thread(target=watch, daemon=True).start()
sys.argv = ["snakemake", "--cores", "1", "--config", f"count={n}", "--quiet", "all", *args]
runpy.run_module("snakemake", run_name="__main__")
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1, 20, 80], help="quick jobs before the wait")
    ap.add_argument("--args", default="", help="more snakemake arguments, e.g. --max-jobs-per-timespan 1000/10s")
    opts = ap.parse_args()
    print(f"snakemake args: {opts.args or '(defaults)'}")
    print("| jobs finished before | scheduler CPU-s over 20 s of waiting | threads |\n|---|---|---|")
    for n in opts.jobs:
        with tempfile.TemporaryDirectory() as work:
            Path(work, "Snakefile").write_text(SNAKEFILE)
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, str(n), *opts.args.split()], cwd=work, capture_output=True, text=True
            )
            result = [line.split()[1:] for line in proc.stderr.splitlines() if line.startswith("RESULT ")]
            if proc.returncode or not result:
                sys.exit(f"snakemake failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
            seconds, threads = result[0]
            print(f"| {n} | {seconds} | {threads} |")


if __name__ == "__main__":
    main()

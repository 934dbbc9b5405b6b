"""The validation curves of a results tree's stages so far, read from each unit's train.log (the log every attempt of
a stage appends to, across resumes): a progress table for stages still training, whose meta.json (export.py's
source) does not exist yet. A resumed stage repeats the steps after its last saved state: the later line of a step
is kept (the run's path from the resume on). A retry (training.attempts) starts its steps again: `attempt` tells the
attempts apart, from the log's "attempt K of N" lines. Both loggers' names are read: vlbind.train and vlbind.attempts
before the package's split (dc33528's trees), vlbind.training.loop and vlbind.training.attempts after.

    python docs/results/paper-rules/progress.py TREE/results OUT.csv   # prints each unit's attempts so far
"""

import re
import sys
from pathlib import Path

import pandas as pd

LINE = re.compile(r"^(?P<time>\S+ \S+),\d+ INFO vlbind\.(?:train|training\.loop): (?P<stage>\w+) "
                  r"step (?P<step>\d+)/(?P<cap>\d+) objects (?P<objects>\S+) loss \S+ val_acc (?P<val>[\d.]+) "
                  r"(?:\([^)]*\) )?best (?P<best>[\d.]+)@(?P<best_step>\d+)")
RETRY = re.compile(r"INFO vlbind\.(?:training\.)?attempts: (?P<stage>\w+): attempt (?P<attempt>\d+) of \d+ ")


def curves(results: Path) -> pd.DataFrame:
    rows = []
    for log in sorted(results.glob("models/*/*/train.log")):
        unit = {"run": log.parts[-3], "unit": log.parts[-2], "finished": (log.parent / "meta.json").exists()}
        attempt = {}  # stage (a ramp's length has its own) -> the attempt its lines belong to
        for line in log.read_text().splitlines():
            if r := RETRY.search(line):
                attempt[r["stage"]] = int(r["attempt"])
            elif m := LINE.match(line):
                rows.append({**unit, "attempt": attempt.get(m["stage"], 1), **m.groupdict()})
    if not rows:
        raise SystemExit(f"no validation logged under {results}/models yet")
    df = pd.DataFrame(rows)
    for c in ("step", "cap", "best_step"):
        df[c] = df[c].astype(int)
    for c in ("val", "best"):
        df[c] = df[c].astype(float)
    return df.drop_duplicates(["run", "unit", "stage", "attempt", "objects", "step"], keep="last")


def summary(table: pd.DataFrame) -> list[str]:
    """One line per run and unit for the page's prose: each attempt's last logged step and its best validation so far
    (the log's `best`, the attempt's own), and whether the unit has finished."""
    lines = []
    for (run, unit), g in table.groupby(["run", "unit"], sort=False):
        attempts = [f"attempt {a} at {r.step:,} (best {r.best:.3f} at {r.best_step:,})"
                    for a, r in ((a, x.iloc[-1]) for a, x in g.groupby("attempt"))]
        lines.append(f"{run} {unit}{' (finished)' if g.finished.iloc[-1] else ''}: " + "; ".join(attempts))
    return lines


if __name__ == "__main__":
    table = curves(Path(sys.argv[1]))
    table.to_csv(sys.argv[2], index=False)
    print("\n".join(summary(table)))

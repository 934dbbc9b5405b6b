"""The plateau rule replayed on recorded validation curves (issue 87, arm P): for each patience (validations) and
min_delta, where the rule would end a stage trained with no stop rule (config/experiments/plateau_probe.yaml), the
best validation it keeps and how far that lies below the best the whole curve reached.

    python docs/results/paper-rules/plateau_probe.py TREE/results/models/seed0/text_s5/metrics.parquet [...]

Each row: curve, patience, min_delta, the step the rule stops at (or `-` where the curve ends first), the kept best
step and validation, the curve's own best, and the shortfall (curve best - kept best).

    python docs/results/paper-rules/plateau_probe.py --pauses PROGRESS.csv [MIN_DELTA]

On a tree's validations (progress.py's table), per stage attempt: the longest pause (validations without a gain of
MIN_DELTA, default 1/512, over the best so far) that a gain ended, and the pause still open at its last validation:
a patience above every ended pause would not have cut any of these curves short."""

import sys

import pandas as pd

from vlbind.training.attempts import plateau_end

PATIENCE = (4, 8, 9, 10, 12, 16, 20, 24, 32, 40)
MIN_DELTA = (1 / 512, 2 / 512, 5 / 512)  # one, two and five validation prompts of mini's 512 (val_size); one: the floor


def table(paths: list[str]) -> pd.DataFrame:
    rows = []
    for path in paths:
        curve = pd.read_parquet(path)
        steps, acc = curve["step"].to_numpy(), curve["val_accuracy"].to_numpy()
        every = int(steps[1] - steps[0])
        for patience in PATIENCE:
            for delta in MIN_DELTA:
                end = plateau_end(steps, acc, patience, every, delta)
                stop, best_step = end if end else (None, int(steps[acc.argmax()]))  # no stop: the cap's best
                kept = float(acc[steps == best_step][0])
                rows.append({"curve": path, "patience": patience, "min_delta": delta, "stop": stop or "-",
                             "kept_best": kept, "curve_best": float(acc.max()),
                             "curve_best_step": int(steps[acc.argmax()]), "shortfall": float(acc.max()) - kept})
    return pd.DataFrame(rows)


def pauses(steps, acc, min_delta: float) -> tuple[int, int, int, int]:
    """(validations of the longest pause a gain ended, the step it began at (the best's), the step of that gain,
    validations since the last gain at the curve's end), as plateau_end counts them."""
    every = int(steps[1] - steps[0]) if len(steps) > 1 else 1
    best, best_step, longest = -1.0, int(steps[0]), (0, int(steps[0]), int(steps[0]))
    for s, a in zip(steps, acc):
        if a >= best + min_delta or best < 0:
            if (s - best_step) // every > longest[0]:
                longest = ((s - best_step) // every, best_step, int(s))
            best, best_step = a, int(s)
    return (*longest, int((steps[-1] - best_step) // every))


def pause_table(progress: str, min_delta: float) -> pd.DataFrame:
    rows = []
    curves = pd.read_csv(progress)
    for (run, unit, attempt, stage), c in curves.groupby(["run", "unit", "attempt", "stage"], sort=False):
        c = c.sort_values("step")
        longest, since, gain, open_ = pauses(c["step"].to_numpy(), c["val"].to_numpy(), min_delta)
        rows.append({"run": run, "unit": unit, "stage": stage, "attempt": attempt, "finished": c["finished"].iloc[0],
                     "last_step": int(c["step"].iloc[-1]), "longest_ended_pause": longest, "from": since,
                     "to": gain, "open_pause": open_})
    return pd.DataFrame(rows)


if __name__ == "__main__":
    pd.set_option("display.width", 200, "display.max_rows", 500)
    if sys.argv[1] == "--pauses":
        print(pause_table(sys.argv[2], float(sys.argv[3]) if len(sys.argv) > 3 else 1 / 512).to_string(index=False))
    else:
        print(table(sys.argv[1:]).to_string(index=False))

"""The plateau rule replayed on recorded validation curves (issue 87, arm P): for each patience (validations) and
min_delta, where the rule would end a stage trained with no stop rule (config/experiments/plateau_probe.yaml), the
best validation it keeps and how far that lies below the best the whole curve reached.

    python docs/results/paper-rules/plateau_probe.py TREE/results/models/seed0/text_s5/metrics.parquet [...]

Each row: curve, patience, min_delta, the step the rule stops at (or `-` where the curve ends first), the kept best
step and validation, the curve's own best, and the shortfall (curve best - kept best)."""

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


if __name__ == "__main__":
    pd.set_option("display.width", 200, "display.max_rows", 500)
    print(table(sys.argv[1:]).to_string(index=False))

"""The stall rule replayed on recorded training logs (docs/results/retries.md): for each stall window, which recorded
attempts it would have ended, at which step, and the expected steps to pass per unit when a failed attempt is retried
(vlbind.attempts.expected_steps_to_pass).

    python docs/results/retries/stall_rule.py LOG_DIR [LOG_DIR ...]   # results/logs/train trees, searched for *.log

A unit's curve is the validation lines of one stage or ramp length in one log (`<unit> step N/... val_acc A`); a
resumed stage's repeated steps keep their last line. Pass bars: mini's (text_s3 / text_s4 and its lengths 0.95,
the rest 0.98). A curve that neither passes nor is ended by the rule fails at its last recorded step (a cap or a
kill: a kill is counted as a failure at the step where it stopped)."""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from vlbind.attempts import expected_steps_to_pass, replay, stall_end

LINE = re.compile(r"INFO vlbind\.train: (\S+) step (\d+)/\d+ objects \S+ loss \S+ val_acc ([\d.]+)")
WINDOWS = [1000, 1500, 2000, 2500, 3000, 3500, 4000, 5000, 7500, 10000, math.inf]
GAIN = 0.01


def bar(unit: str) -> float:
    return 0.95 if unit.startswith(("text_s3", "text_s4")) else 0.98


def curves(dirs: list[str]) -> pd.DataFrame:
    rows = []
    for d in dirs:
        for log in sorted(Path(d).rglob("*.log")):
            for line in log.read_text().splitlines():
                if m := LINE.search(line):
                    rows.append({"log": str(log), "unit": m[1], "step": int(m[2]), "val_accuracy": float(m[3])})
    df = pd.DataFrame(rows).drop_duplicates(["log", "unit", "step"], keep="last")
    return df.sort_values(["log", "unit", "step"]).reset_index(drop=True)


def main(dirs: list[str]) -> None:
    df = curves(dirs)
    groups = {k: g for k, g in df.groupby(["log", "unit"])}
    print(f"{len(groups)} recorded attempts from {df['log'].nunique()} logs\n")
    print("ended by the rule (window, gain 0.01): log unit step-ended best-before; then what the curve did")
    for w in [2000, 3000, 3500, 5000]:
        print(f"-- window {w}")
        for (log, unit), g in groups.items():
            end = stall_end(g["step"].to_numpy(), g["val_accuracy"].to_numpy(), bar(unit), w, GAIN)
            if end is not None:
                before = g[g["step"] <= end]["val_accuracy"].max()
                after = g[g["step"] > end]
                then = (f"went on to pass at {int(after[after['val_accuracy'] >= bar(unit)]['step'].iloc[0])}"
                        if (after["val_accuracy"] >= bar(unit)).any() else
                        f"recorded to {int(g['step'].max())}, best {g['val_accuracy'].max():.3f}, never passed")
                print(f"   {Path(log).parent.name}/{Path(log).name} {unit}: ends at {end} (best {before:.3f}); {then}")
    print("\nexpected steps to pass per unit (curves pooled over seeds and logs), by window:")
    units = sorted({u for _, u in groups}, key=lambda u: (u.rstrip("0123456789_n"), u))
    table = []
    for unit in units:
        pool = [g for (_, u), g in groups.items() if u == unit]
        row = {"unit": unit, "curves": len(pool), "pass_as_recorded": sum(replay(g, bar(unit), math.inf, GAIN, None)[1]
                                                                         for g in pool)}
        for w in WINDOWS:
            row[str(w)] = expected_steps_to_pass(pool, bar(unit), w, GAIN)
        table.append(row)
    t = pd.DataFrame(table)
    passing = t[np.isfinite(t[str(math.inf)])]  # units no recorded curve passes cost the cap whatever the window
    total = {"unit": "sum (units that pass)", "curves": passing["curves"].sum(),
             "pass_as_recorded": passing["pass_as_recorded"].sum()}
    total |= {str(w): passing[str(w)].sum() for w in WINDOWS}
    t = pd.concat([t, pd.DataFrame([total])], ignore_index=True)
    print(t.to_string(index=False, float_format=lambda x: f"{x:.0f}"))


if __name__ == "__main__":
    main(sys.argv[1:])

"""The stall rule replayed on recorded validation curves (docs/results/retries.md): for each stall window, which
recorded attempts it would have ended, at which step, and the expected steps to pass per unit when a failed attempt
is retried (vlbind.training.attempts.expected_steps_to_pass).

    python docs/results/retries/stall_rule.py mini     # mini's curves (curves/mini-5ad55f4.csv), mini's bars
    python docs/results/retries/stall_rule.py paper    # the paper-size curves (curves/paper-size.csv), bar 0.95
    python docs/results/retries/stall_rule.py extract LOG_DIR [LOG_DIR ...] > curves.csv   # from training logs

mini's curves are the validation lines of the two recorded mini runs at 5ad55f4 (`../shared/runs/`: 8 seeds'
text_s1-s3 and 6 seeds' text_s4 on an H200; 3 seeds' text_s1-text_s5 and noise_text on a bf16 CPU), one curve per
stage or ramp length and log (`<unit> step N/... val_acc A`; a resumed stage's repeated steps keep their last line);
pass bars mini's (text_s3 / text_s4 and its lengths 0.95, the rest 0.98). The paper-size curves are the ones the
project's pages record validation by validation (every 500 steps, two decimals; each row names its page), bar
`train.pass_accuracy` 0.95. A curve that neither passes nor is ended by the rule fails at its last recorded step (a
cap, a plateau stop, or the run's end)."""

import math
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from vlbind.training.attempts import expected_steps_to_pass, replay, stall_end

HERE = Path(__file__).parent
MINI, PAPER = HERE / "curves/mini-5ad55f4.csv", HERE / "curves/paper-size.csv"
LINE = re.compile(r"INFO vlbind\.train: (\S+) step (\d+)/\d+ objects \S+ loss \S+ val_acc ([\d.]+)")
GAIN = 0.01


def mini_bar(unit: str) -> float:
    return 0.95 if unit.startswith(("text_s3", "text_s4")) else 0.98


def extract(dirs: list[str]) -> pd.DataFrame:
    """The validation curves of every training log of runs' `RUN/results/logs` folders, each log named
    `RUN/<its path under train/>`."""
    rows = []
    for d in map(Path, dirs):
        for log in sorted((d / "train").rglob("*.log")):
            name = f"{d.resolve().parent.parent.name}/{log.relative_to(d / 'train')}"
            for line in log.read_text().splitlines():
                if m := LINE.search(line):
                    rows.append({"log": name, "unit": m[1], "step": int(m[2]), "val_accuracy": float(m[3])})
    df = pd.DataFrame(rows).drop_duplicates(["log", "unit", "step"], keep="last")
    return df.sort_values(["log", "unit", "step"]).reset_index(drop=True)


def ended(groups: dict, bar, windows: list[int]) -> None:
    print("ended by the rule (window, gain 0.01): curve, step ended (best before); then what the curve did")
    for w in windows:
        print(f"-- window {w}")
        for key, g in groups.items():
            b = bar(key)
            end = stall_end(g["step"].to_numpy(), g["val_accuracy"].to_numpy(), b, w, GAIN)
            if end is not None:
                before = g[g["step"] <= end]["val_accuracy"].max()
                after = g[g["step"] > end]
                then = (f"went on to pass at {int(after[after['val_accuracy'] >= b]['step'].iloc[0])}"
                        if (after["val_accuracy"] >= b).any() else
                        f"recorded to {int(g['step'].max())}, best {g['val_accuracy'].max():.3f}, never passed")
                print(f"   {key}: ends at {end} (best {before:.3f}); {then}")


def expected(pools: dict, bar, windows: list[float]) -> pd.DataFrame:
    """Expected steps to pass per unit (its curves pooled), by window, and their sum over the units that pass."""
    table = []
    for unit, pool in pools.items():
        row = {"unit": unit, "curves": len(pool),
               "pass_as_recorded": sum(replay(g, bar(unit), math.inf, GAIN, None)[1] for g in pool)}
        row |= {str(w): expected_steps_to_pass(pool, bar(unit), w, GAIN) for w in windows}
        table.append(row)
    t = pd.DataFrame(table)
    passing = t[np.isfinite(t[str(math.inf)])]  # units no recorded curve passes cost the cap whatever the window
    total = {"unit": f"sum ({len(passing)} units that pass)", "curves": passing["curves"].sum(),
             "pass_as_recorded": passing["pass_as_recorded"].sum()} | {str(w): passing[str(w)].sum() for w in windows}
    return pd.concat([t, pd.DataFrame([total])], ignore_index=True)


def mini() -> None:
    df = pd.read_csv(MINI)
    groups = {f"{log} {unit}": g for (log, unit), g in df.groupby(["log", "unit"])}
    print(f"{len(groups)} recorded attempts from {df['log'].nunique()} logs\n")
    ended(groups, lambda key: mini_bar(key.split()[-1]), [2000, 3000, 3500, 5000])
    units = sorted(df["unit"].unique(), key=lambda u: (u.rstrip("0123456789_n"), u))
    pools = {u: [g for (_, unit), g in df.groupby(["log", "unit"]) if unit == u] for u in units}
    print("\nexpected steps to pass per unit (curves pooled over seeds and logs), by window:")
    windows = [1000, 1500, 2000, 2500, 3000, 3500, 4000, 5000, 7500, 10000, math.inf]
    print(expected(pools, mini_bar, windows).to_string(index=False, float_format=lambda x: f"{x:.0f}"))


def paper() -> None:
    df = pd.read_csv(PAPER)
    windows = [3000, 3500, 4000, 5000, 6000, 7500, math.inf]
    rows = []
    for _, g in df.groupby("curve"):
        first = g.iloc[0]
        row = {"curve": first["curve"], "where": f"{first['machine']} {first['commit']}", "seed": first["seed"],
               "stage": first["stage"], "recorded": first["recorded"], "escape": first["escape"]}
        for w in windows:
            end = stall_end(g["step"].to_numpy(), g["val_accuracy"].to_numpy(), 0.95, w, GAIN)
            row[str(w)] = "-" if end is None else f"{end:,}" + (" ESCAPE ENDED" if first["escape"] == "yes" else "")
        rows.append(row)
    print("the step each window ends each paper-size curve at (- : never), bar 0.95, gain 0.01:")
    print(pd.DataFrame(rows).to_string(index=False))
    queried = df[df["setting"].str.startswith("every object")]  # config.yaml's setting; one query never passed
    pools = {s: [g for _, g in queried[queried["stage"] == s].groupby("curve")]
             for s in sorted(queried["stage"].unique())}
    print("\nexpected steps to pass per stage (every object queried; indicative only at this count), by window:")
    print(expected(pools, lambda unit: 0.95, windows).to_string(index=False, float_format=lambda x: f"{x:.0f}"))


if __name__ == "__main__":
    what, args = (sys.argv[1] if len(sys.argv) > 1 else ""), sys.argv[2:]
    if what == "extract" and args:
        extract(args).to_csv(sys.stdout, index=False)
    elif what in ("mini", "paper") and not args:
        mini() if what == "mini" else paper()
    else:
        sys.exit(__doc__)

"""Issue 87's per-seed tables across arms, from exports of their trees (docs/results/mini/export.py --results
TREE/results --out DIR), as Markdown: accuracy at 8 objects and OOD (9..32) of every variant per seed, then each
comparison the issue asks for per seed with its sign count (noise on text against text_only and against text_long,
images against text_only and noise_image_text against noise_text), beside the paper's, then the circuit label of every
analysed run at its first spike and at the last layer (the DAG's circuits.csv where the run exported it; for a run in
progress, circuit_label with config.yaml's rule over its exported interchange.csv and probes.csv, as the circuits rule
does). Shuffled lists (the paper's order) unless --order says otherwise. An arm that trains one variant only (arm E:
noise_text; arm C: text_long) is compared against the other variants of the arm named by --base, as the cell says
(E's noise_text - P's text_only, P's noise_text - C's text_long); without --base, not at all. First, where the
exports have training.csv, the parents (text_s1-text_s4) of each arm against the first arm's: steps, best step, best
validation, attempts.

    python docs/results/paper-rules/compare.py complete=docs/results/mini/693ee8b P=docs/results/paper-rules/P \\
        E=docs/results/paper-rules/E
"""
import argparse
from pathlib import Path

import pandas as pd

from vlbind.evaluation.claims import PAPER_OOD, per_run
from vlbind.interp.circuits import circuit_label

# (a, b): a - b out of distribution, per seed; the noise effect (against text_only and the control that
# trains as long), the image effect, and images over noise
COMPARISONS = [("noise_text", "text_only"), ("noise_text", "text_long"), ("text_long", "text_only"),
               ("image_text", "text_only"), ("noise_image_text", "noise_text")]


def pct(x) -> str:
    return "—" if pd.isna(x) else f"{100 * x:.1f}"


def per_seed(cells: list[str]) -> str:
    """Seed by seed, every seed any arm has ("—" where this one has none yet), or "—" for none at all."""
    cells = ["—" if c.startswith("—") else c for c in cells]
    return "—" if set(cells) == {"—"} else " / ".join(cells)


def runs(export: Path, order: str) -> pd.DataFrame:
    """One row per run of `order`: per_run's (in and out of distribution, chance, used) and the accuracy at 8
    objects; none where nothing is evaluated yet."""
    if not (export / "eval_by_length.csv").is_file():
        return pd.DataFrame(columns=["variant", "run", "seed", "ood", "used", "at8"])
    ev = pd.read_csv(export / "eval_by_length.csv")
    table = per_run(ev, order)
    at8 = ev[(ev.order == order) & (ev.n_objects == 8)].set_index(["variant", "run"])["accuracy"]
    return table.assign(at8=[at8.get((v, r)) for v, r in zip(table.variant, table.run)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("arms", nargs="+", help="NAME=EXPORT_DIR, in the order the columns show them")
    ap.add_argument("--order", default="shuffled")
    ap.add_argument("--base", help="the arm whose b an arm without b is compared against (default: none)")
    args = ap.parse_args()
    arms = dict(a.split("=", 1) for a in args.arms)
    if args.base is not None and args.base not in arms:
        ap.error(f"--base {args.base}: no such arm; the arms: {', '.join(arms)}")
    print_parents(arms)
    tables = {name: runs(Path(d), args.order) for name, d in arms.items()}
    seeds = sorted({s for t in tables.values() for s in t.seed})

    print(f"Accuracy at 8 objects and OOD (9..32), % for seeds {', '.join(map(str, seeds))} ({args.order} lists; "
          "`*`: a run the DAG left out of means; —: not evaluated yet)\n")
    print("| variant | " + " | ".join(f"{n}: at 8 | {n}: OOD" for n in arms) + " | paper's OOD |")
    print("|---|" + "---|---|" * len(arms) + "---|")
    variants = list(dict.fromkeys(v for t in tables.values() for v in t.variant))
    for v in variants:
        cells = []
        for t in tables.values():
            r = t[t.variant == v].set_index("seed").reindex(seeds)
            mark = ["*" if pd.notna(u) and not u else "" for u in r.used]
            cells += [per_seed([pct(x) + m for x, m in zip(r[c], mark)]) for c in ("at8", "ood")]
        paper = PAPER_OOD.get(v)
        print(f"| {v} | " + " | ".join(cells) + f" | {pct(paper[0]) if paper else '—'} |")

    print("\nDifferences out of distribution, points per seed (a - b), and how many seeds are above 0\n")
    print("| a - b | " + " | ".join(arms) + " | paper |")
    print("|---|" + "---|" * len(arms) + "---|")
    for a, b in COMPARISONS:
        cells = []
        for name, t in tables.items():
            # a variant this arm lacks from the base arm, if any; never both (that is the base arm's own cell)
            src = {x: name if (t.variant == x).any() else args.base for x in (a, b)}
            if src[a] != name and src[b] != name:
                cells.append("—")
                continue
            ta, tb = (tables[src[x]][tables[src[x]].variant == x].set_index("seed")["ood"] if src[x]
                      else pd.Series(dtype=float) for x in (a, b))
            d = (ta - tb).reindex(seeds)
            n = int(d.notna().sum())
            whose = "".join(f", {k}: {src[x]}'s" for k, x in (("a", a), ("b", b)) if n and src[x] != name)
            cells.append(f"{per_seed([pct(x) for x in d])} ({int((d > 0).sum())} of {n}{whose})" if n else "—")
        paper = pct(PAPER_OOD[a][0] - PAPER_OOD[b][0]) if a in PAPER_OOD and b in PAPER_OOD else "—"
        print(f"| {a} - {b} | " + " | ".join(cells) + f" | {paper} |")
    print_labels(arms)


PARENTS = ["text_s1", "text_s2", "text_s3", "text_s4"]
PARENT_FIELDS = ["steps", "best_step", "best_val_accuracy", "attempts", "ramp_steps"]


def print_parents(arms: dict[str, str]) -> None:
    """The parents of each arm per seed as steps, best step, best validation and attempts (and a ramp's steps before
    its last length, text_s4's), beside the first arm's; "equal" where all equal the first arm's."""
    tables = {n: pd.read_csv(Path(d) / "training.csv").set_index(["run", "stage"]) for n, d in arms.items()
              if (Path(d) / "training.csv").is_file()}
    if len(tables) < 2:
        return
    first = next(iter(tables))
    print(f"The parents: steps, best step, best validation, attempts, + a ramp's steps before its last length "
          f"(against {first}'s)\n")
    print("| run | stage | " + " | ".join(tables) + " |")
    print("|---|---|" + "---|" * len(tables))
    for run, stage in tables[first].index:
        if stage not in PARENTS:
            continue
        ref = tables[first].loc[(run, stage), PARENT_FIELDS]
        cells = []
        for name, t in tables.items():
            if (run, stage) not in t.index:
                cells.append("—")
                continue
            row = t.loc[(run, stage), PARENT_FIELDS]
            same = name != first and all(a == b or (pd.isna(a) and pd.isna(b)) for a, b in zip(row, ref))
            ramp = "" if pd.isna(row.ramp_steps) or not row.ramp_steps else f" + {row.ramp_steps:,.0f}"
            cells.append("equal" if same else f"{row.steps:,.0f} / {row.best_step:,.0f} / {row.best_val_accuracy:.3f} "
                         f"/ {row.attempts:.0f}{ramp}")
        print(f"| {run} | {stage} | " + " | ".join(cells) + " |")
    print()


def labels(export: Path) -> pd.DataFrame:
    """Per analysed run (variant, run): its label at the first spike (`circuit`, " (weak)" where weak) and at the last
    layer (`last_circuit`)."""
    if (export / "circuits.csv").is_file():
        table = pd.read_csv(export / "circuits.csv")
    elif (export / "interchange.csv").is_file() and (export / "probes.csv").is_file():
        ic, pr = pd.read_csv(export / "interchange.csv"), pd.read_csv(export / "probes.csv")
        table = pd.DataFrame([{"variant": v, "run": r, **circuit_label(g, pr[(pr.variant == v) & (pr.run == r)])}
                              for (v, r), g in ic.groupby(["variant", "run"])])
    else:
        return pd.DataFrame(columns=["variant", "run", "first", "last"])
    weak = table["weak"].astype("boolean").fillna(False)
    return table.assign(first=table["circuit"] + weak.map({True: " (weak)", False: ""}), last=table["last_circuit"])


def print_labels(arms: dict[str, str]) -> None:
    tables = {name: labels(Path(d)) for name, d in arms.items()}
    rows = pd.concat([t.assign(arm=name) for name, t in tables.items()], ignore_index=True)
    if rows.empty:
        return
    print("\nCircuit labels per seed, at the first spike / at the last layer (`circuit_label`; —: not analysed yet)\n")
    print("| variant | " + " | ".join(arms) + " |")
    print("|---|" + "---|" * len(arms))
    for v in dict.fromkeys(rows.variant):
        cells = []
        for name in arms:
            t = rows[(rows.arm == name) & (rows.variant == v)].sort_values("run")
            cells.append("; ".join(f"{r.run}: {r.first} / {r.last}" for r in t.itertuples()) or "—")
        print(f"| {v} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

"""Print the mini page's tables (README.md here) as Markdown from the CSVs export.py copied, so that the page
quotes the DAG's numbers and nothing else:

    python docs/results/mini/export.py && python docs/results/mini/page_tables.py
    python docs/results/mini/page_tables.py --dir DIR training   # another export (a run in progress: training only)

Per seed throughout; accuracies in %, shares of interchange pairs as fractions.
"""
import argparse
from pathlib import Path

import pandas as pd

from vlbind.core.stages import CONTROLS, CURRICULUM, NOISE_CONTROL, STAGE_PARENTS, VISION_STAGES, lineage
from vlbind.evaluation import tables
from vlbind.evaluation.claims import PAPER_OOD, per_run
from vlbind.params import run_name

HERE = Path(__file__).resolve().parent


def pct(x) -> str:
    return "—" if pd.isna(x) else f"{100 * x:.1f}"


def seeds(values) -> str:
    return " / ".join(values)


def claims() -> None:
    df = pd.read_csv(HERE / "claims.csv")
    print("| claim | verdict | per run or pair | n (apart, learnt, unlearnt, learnable, agree), p |")
    print("|---|---|---|---|")
    for r in df.itertuples():
        extra = [f"{k[2:]} {int(v)}" for k in ("n_apart", "n_learnt", "n_unlearnt", "n_learnable", "n_agree")
                 if k in df and not pd.isna(v := getattr(r, k)) and (k != "n_apart" or v)]
        print(f"| {r.claim}: {r.statement} | **{r.verdict}** | {r.per_run} | {int(r.n)}"
              f"{' (' + ', '.join(extra) + ')' if extra else ''}, {r.p_sign:.3g} |")


def accuracy() -> None:
    """Per run (one a seed at mini) in and out of distribution and chance (the mean over the OOD lengths of 1/n), as
    claims.per_run reads them for claims.csv; the mean over the runs the DAG used and the paper's mean OOD (fig3; the
    paper evaluates shuffled lists)."""
    ev = pd.read_csv(HERE / "eval_by_length.csv")
    ood = pd.read_csv(HERE / "ood_accuracy.csv")
    print("| variant | order | in distribution (2..8), % per seed | OOD (9..32), % per seed "
          "| OOD mean ± SE (runs used) | left out | OOD chance, % | paper's OOD, % |")
    print("|---|---|---|---|---|---|---|---|")
    runs = {order: per_run(ev, order) for order in ev.order.unique()}  # what claims.csv reads, per run
    for o in ood.itertuples():
        r = runs[o.order][runs[o.order].variant == o.variant].sort_values("seed")
        inside, out, chance = r.in_distribution, r.ood, r.ood_chance.mean()
        left = int(o.diverged_runs) + int(o.unconverged_runs)
        paper = PAPER_OOD.get(o.variant)
        paper = "—" if paper is None else pct(paper[0]) + (f" ± {pct(paper[1])}" if paper[1] else "")
        print(f"| {o.variant} | {o.order} | {seeds(pct(x) for x in inside)} | {seeds(pct(x) for x in out)} | "
              f"{pct(o.ood_mean)} ± {pct(o.ood_se)} ({int(o.runs)}) | {left} | {pct(chance)} | "
              f"{paper if o.order == 'shuffled' else '—'} |")


def mechanisms() -> None:
    df = pd.read_csv(HERE / "circuits.csv")
    print("| variant | seed | first spike: label (layer, position: winner share) | last layer: label (layer: share) "
          "| pairs |")
    print("|---|---|---|---|---|")
    for r in df.itertuples():
        first = f"{r.circuit}" + (" (weak)" if r.weak else "")
        if not pd.isna(r.spike_layer):
            first += f" (L{int(r.spike_layer)}, {r.label_position}: {r.winner} {r.winner_share:.2f})"
        last = getattr(r, "last_circuit", "—")
        if "last_layer" in df and not pd.isna(r.last_layer):
            last += f" (L{int(r.last_layer)}: {r.last_winner} {r.last_winner_share:.2f})"
        print(f"| {r.variant} | {r.run} | {first} | {last} | {int(r.pairs_kept)} |")


def training() -> None:
    df = pd.read_csv(HERE / "training.csv")
    df["seed"] = df.run.str.extract(r"seed(\d+)")[0].astype(int)
    all_seeds = sorted(df.seed.unique())
    print("| stage | " + " | ".join(f"seed {s}" for s in all_seeds) + " |")
    print("|---|" + "---|" * len(all_seeds))
    for stage in [s for s in STAGE_PARENTS if s in set(df.stage)]:
        cells = []
        for seed in all_seeds:  # a run in progress: a seed may not have trained the stage yet
            trained = df[(df.stage == stage) & (df.seed == seed)]
            if trained.empty:
                cells.append("—")
                continue
            runs = list(trained.itertuples())  # an image stage: one run per encoder, each named
            cells.append("; ".join((f"{r.run.split('-', 1)[1]}: " if len(runs) > 1 else "") + stage_cell(r)
                                   for r in runs))
        print(f"| {stage} | " + " | ".join(cells) + " |")


WHY = {"target_accuracy": "target", "plateau": "plateau", "max_steps": "cap", "stalled": "stall rule"}


def judged(r, chance: bool = False) -> str:
    """A stage's best validation accuracy, with its chance if `chance`; where its validation mixes kinds of prompt (an
    image stage's grounding beside its retrieval), the part its rules read, named, with that part's chance always:
    the mix is not the accuracy."""
    part = getattr(r, "val_judged", "")
    part = part if isinstance(part, str) else ""
    return (f"{r.best_val_accuracy:.3f}" + (f" {part}" if part else "")
            + (f" (chance {r.val_chance:.2f})" if (part or chance) and pd.notna(r.val_chance) else ""))


def stage_cell(r) -> str:
    """A stage's training of one run (a training.csv row): steps and why it stopped (the kept attempt's stop and,
    where another attempt ran after it and ended otherwise, how the stage ended), best validation, wall minutes,
    attempts and ramp retries, and its ramp lengths' steps."""
    why = WHY.get(r.stopped_because, r.stopped_because)
    ended = getattr(r, "ended_because", r.stopped_because)  # an export from before the column: the kept attempt's
    if isinstance(ended, str) and ended != r.stopped_because:
        why = f"kept attempt: {why}; ended at the {WHY.get(ended, ended)}" if ended == "max_steps" else \
            f"kept attempt: {why}; last: {WHY.get(ended, ended)}"
    cell = f"{r.steps + (r.ramp_steps or 0):,} ({why}), {judged(r)}, {r.wall_minutes:.1f} min"
    if r.attempts > 1:  # the retry rule (vlbind.training.attempts): the stage's own attempts, then its ramp lengths'
        cell += f", {r.attempts} attempts"
    if r.ramp_retries:
        cell += f", {r.ramp_retries} ramp retries"
    if isinstance(r.ramp, str) and r.ramp:  # "n:steps:best ..." per length before the stage's own
        cell += "; ramp " + " / ".join(f"{int(x.split(':')[1]):,}" for x in r.ramp.split()) + f" / {r.steps:,}"
    return cell


def capped() -> None:
    """The stages that their own rule did not end (neither the target nor the plateau: the step cap or the stall rule,
    after every attempt): the steps each burnt, a cost to lower. The binding-loss controls and the noise control
    train a fixed number of steps by design (the noise control: its twin's), which their cap sets: not listed."""
    df = pd.read_csv(HERE / "training.csv")
    fixed = set(CONTROLS) | set(NOISE_CONTROL)
    short = df[~df.stopped_because.isin(["target_accuracy", "plateau"]) & ~df.stage.isin(fixed)]
    print("| run | stage | steps burnt (attempts, ramp included) | best validation accuracy "
          "| kept attempt stopped by | last attempt stopped by | wall minutes |")
    print("|---|---|---|---|---|---|---|")
    for r in short.itertuples():
        print(f"| {r.run} | {r.stage} | {r.steps + (r.ramp_steps or 0):,} ({r.attempts} attempt"
              f"{'s' if r.attempts > 1 else ''}) | {judged(r, chance=True)} "
              f"| {r.stopped_because} | {getattr(r, 'ended_because', r.stopped_because)} | {r.wall_minutes:.1f} |")
    print(f"\n{len(short)} stages, {int((short.steps + short.ramp_steps.fillna(0)).sum()):,} steps, "
          f"{short.wall_minutes.sum():.0f} wall minutes")


def part_of(job: str) -> str:
    """The part of the run a job (job_wall_times.csv's name, e.g. train/seed0-render_cnn/image) belongs to."""
    kind, *_, last = job.split("/")
    if kind != "train":
        return {"encoders": "encoder, renderings, features", "render": "encoder, renderings, features",
                "features": "encoder, renderings, features", "evaluate": "evaluation", "interp": "analyses"}.get(
            kind, "tables and figures")
    if last in VISION_STAGES:
        return "image arm"
    if last in CURRICULUM:
        return "curriculum control"
    if last in CONTROLS:
        return "binding-loss control"
    if last in NOISE_CONTROL:
        return "noise control"
    return "grounding" if last == "grounding" else "text arm"


def chain(took: pd.Series, seed: str, last: str, encoder: str | None = None) -> float:
    """Seconds of training from text_s1 to stage `last` of a seed (vision stages from its run with `encoder`)."""
    return sum(took.get((run_name(int(seed), s, encoder), s), 0.0) for s in lineage(last))


def cost() -> None:
    """Job-minutes per part and seed, and each seed's training chain: text_s1 to grounding, then the longest of each
    encoder's image arm, the curriculum control and the noise control (after its twin, noise_text), what a seed
    waits with a core per job. A training job's minutes
    are its benchmark's or, where larger, training.csv's `wall_minutes` (every attempt, ramp length and resumed
    stretch): a resumed job's benchmark file keeps only its last stretch, and `wall_minutes` leaves out start-up."""
    df = pd.read_csv(HERE / "job_wall_times.csv")
    trained = pd.read_csv(HERE / "training.csv")
    wall = pd.Series(trained.wall_minutes.to_numpy() * 60, index="train/" + trained.run + "/" + trained.stage)
    df["seconds"] = df.job.map(wall).fillna(0).clip(lower=df.seconds)
    df["part"] = df.job.map(part_of)
    df["seed"] = df.job.str.extract(r"seed(\d+)")[0]
    minutes = df.groupby(["part", "seed"], dropna=False).seconds.sum().unstack("seed") / 60
    per_seed = [s for s in minutes.columns if isinstance(s, str)]  # the rest (NaN): jobs of no one seed
    print("| part | " + " | ".join(f"seed {s}" for s in per_seed) + " | all |")
    print("|---|" + "---|" * (len(per_seed) + 1))
    for part, row in minutes.iterrows():
        print(f"| {part} | " + " | ".join("—" if pd.isna(row[s]) else f"{row[s]:.1f}" for s in per_seed)
              + f" | {row.sum():.1f} |")
    print("| **all** | " + " | ".join(f"{minutes[s].sum():.1f}" for s in per_seed)
          + f" | **{minutes.sum().sum():.1f}** |")
    train = df[df.job.str.startswith("train/")].assign(
        run=lambda d: d.job.str.split("/").str[1], stage=lambda d: d.job.str.split("/").str[-1])
    took = train.set_index(["run", "stage"]).seconds
    for seed, jobs in train.groupby("seed"):
        encoders = sorted({r.split("-", 1)[1] for r in jobs.run if "-" in r})  # the seed's vision runs
        arms = {f"image arm ({e})": chain(took, seed, "noise_image_text", e) for e in encoders}
        arms["curriculum control"] = chain(took, seed, "noise_curriculum_text")
        for control, twin in NOISE_CONTROL.items():  # trained after its twin, whose steps it takes
            if (own := (run_name(int(seed), control), control)) in took:
                arms["noise control"] = chain(took, seed, twin) + took[own]
        print(f"\nseed {seed}'s training chain: {max(arms.values()) / 60:.1f} minutes ("
              + ", ".join(f"{k} {v / 60:.1f}" for k, v in arms.items()) + ")", end="")
    print()


def wall() -> None:
    """The run's wall from its Snakemake runs (scheduler_runs.csv, export.py: Snakemake's own log of each), merged
    where they overlap into stretches: a stretch's end where a scheduler was killed, not stopped, is the last line it
    or its jobs logged, a lower bound. Pauses inside a stretch (SIGSTOP) are in its minutes."""
    stretch = tables.stretches(pd.read_csv(HERE / "scheduler_runs.csv", parse_dates=["started", "ended"]))
    print("| stretch | started | ended | minutes | Snakemake runs | jobs finished |")
    print("|---|---|---|---|---|---|")
    for i, r in enumerate(stretch.itertuples(), 1):
        low = "at least " if r.ends_unlogged else ""
        print(f"| {i} | {r.started:%Y-%m-%d %H:%M:%S} | {low}{r.ended:%H:%M:%S} | {low}{r.minutes:.1f} "
              f"| {r.schedulers} | {r.jobs} |")
    low = "at least " if stretch.ends_unlogged.any() else ""
    print(f"\nwall: {low}{stretch.minutes.sum():.1f} minutes over {len(stretch)} stretches")


PARTS = {f.__name__: f for f in (claims, accuracy, mechanisms, training, capped, cost, wall)}
if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, default=HERE, help="the exported CSVs (default: this folder)")
    parser.add_argument("parts", nargs="*", help=f"tables to print, of {', '.join(PARTS)} (default: all)")
    args = parser.parse_args()
    if unknown := set(args.parts) - set(PARTS):
        parser.error(f"no table {', '.join(sorted(unknown))}; the tables: {', '.join(PARTS)}")
    HERE = args.dir
    for name in args.parts or PARTS:
        print(f"\n### {name}\n")
        PARTS[name]()

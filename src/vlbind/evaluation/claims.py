"""The claims table (results/tables/claims.csv): one row per claim of the paper a run can test, the numbers it
rests on, per seed, and a verdict from a rule stated in the row. README's and docs/results' sentences quote it;
none may say more than its row. No torch.

Numbers come from the evaluation tables of one prompt order (the first evaluated: the one convergence is judged
on) and from circuits.csv. OOD accuracy is given raw and above chance (chance over the OOD lengths: the mean of
1/n); a paired difference is the same either way. Pairs are by seed: an image run seed{S}-{encoder} pairs with the
text run seed{S}. A comparison counts every run as what it scored, those left out of means (diverged: a stage
stalled at chance; not converged) too: such a run is its arm's outcome, flagged in the row, never dropped. The other
rows leave such runs out and count them.

Verdicts: "holds" / "fails" / "mixed" (some runs or pairs each way) / "untested" (no run to read), and "smaller".
- a label claim holds when every labelled run of its variants carries one of the claimed circuits (interp.circuits'
  first-spike reading, appendix F's) and fails when none does; a run labelled "none" or "unresolved" (no mechanism
  visible) is neither for nor against: it is counted apart (`n_apart`). `n_agree`: on how many of the runs the
  reading at the layer before the read-out (`last_circuit`) gives the same label;
- a comparison A > B holds when every pair's OOD difference exceeds MIN_GAIN and fails when none does; it is
  "smaller" when every pair exceeds MIN_GAIN but the mean difference is under half the paper's (`paper_diff`): the
  direction holds, the size does not reproduce. A pair is "learnt" when both runs answer in distribution at least
  LEARNT above chance; `n_learnt` and `n_unlearnt` count the two kinds. The controls' claims (images, not the
  curriculum) rest on the learnt pairs alone: a pair where only the image run learnt says that images make the task
  learnable (`n_learnable`), not that they beat a model of the same skill, and is counted apart;
- "fails beyond the training range" holds when every run's OOD accuracy lies within FAILS_WITHIN of chance;
- "learns shuffled lists" holds when every run's in-distribution accuracy on shuffled lists lies at least
  LEARNT above chance.
Every row gives n (runs or pairs read) and `p_sign`, a one-sided sign test: the chance of at least as many of the n
for the claim if each run or pair were a fair coin (3 of 3: 0.125; 4 of 4: 0.0625).
"""

from __future__ import annotations

from math import comb

import numpy as np
import pandas as pd

from vlbind.core.stages import CONTROLS, CURRICULUM, NOISE_CONTROL, VARIANT_STAGE, VISION_STAGES
from vlbind.evaluation.tables import converged

MIN_GAIN = 0.02  # an OOD difference of 2 points or less counts as no gain
FAILS_WITHIN = 0.05  # OOD within 5 points of chance: the run fails beyond the training range
LEARNT = 0.5  # in-distribution accuracy at least 0.5 above chance: the run has learnt the task
SYMBOLIC_CIRCUITS = ("Symbolic-A", "Symbolic-B")  # circuits.csv's symbolic labels (interp.circuits)
NO_MECHANISM = ("none", "unresolved")  # circuits.csv labels that show no mechanism: neither for nor against


def per_run(evals: pd.DataFrame, order: str) -> pd.DataFrame:
    """One row per run of one prompt order: variant, run, seed, used (neither diverged nor unconverged), in
    distribution accuracy and its chance, OOD accuracy and its chance (means over lengths, each length equal)."""
    df = evals[evals["order"] == order] if "order" in evals else evals
    used = set(map(tuple, converged(df)[["variant", "run"]].drop_duplicates().to_numpy()))
    rows = []
    for (variant, run), d in df.groupby(["variant", "run"], sort=False):
        inside, ood = d[d["in_distribution"]], d[~d["in_distribution"]]
        rows.append({"variant": variant, "run": run, "seed": int(d["seed"].iloc[0]), "used": (variant, run) in used,
                     "retries": int(d["retries"].max()) if "retries" in d else 0,
                     "in_distribution": inside["accuracy"].mean(), "in_chance": (1 / inside["n_objects"]).mean(),
                     "ood": ood["accuracy"].mean(), "ood_chance": (1 / ood["n_objects"]).mean()})
    return pd.DataFrame(rows)


def _mean_se(x) -> tuple[float, float]:
    x = np.asarray(x, dtype=float)
    if not len(x):
        return float("nan"), float("nan")
    return float(x.mean()), float(x.std(ddof=1) / np.sqrt(len(x))) if len(x) > 1 else float("nan")


def _verdict(ok: list[bool]) -> str:
    if not ok:
        return "untested"
    return "holds" if all(ok) else "fails" if not any(ok) else "mixed"


def sign_p(ok: list[bool]) -> float:
    """One-sided sign test: P(at least sum(ok) of len(ok) fair coin flips come up 'for'); nan for no trials."""
    n, k = len(ok), int(sum(ok))
    return sum(comb(n, i) for i in range(k, n + 1)) / 2**n if n else float("nan")


def _left_out(runs: pd.DataFrame) -> str:
    n = int((~runs["used"]).sum())
    return f"; {n} run(s) left out (diverged or not converged)" if n else ""


def compare(runs: pd.DataFrame, a: str, b: str, claim: str, statement: str, paper_diff: float | None = None,
            learnt_only: bool = False) -> dict:
    """The claim "A > B out of distribution", paired by seed; every run counted as it scored (module doc).
    `paper_diff`: the paper's difference (a fraction), where it gives one. `learnt_only`: the verdict reads the
    pairs of two learnt runs only; a pair where only A learnt counts as `n_learnable` (module doc)."""
    ra, rb = runs[runs["variant"] == a], runs[runs["variant"] == b]
    pairs = ra.merge(rb, on="seed", suffixes=("_a", "_b"))
    learnt = {s: pairs[f"in_distribution_{s}"] - pairs[f"in_chance_{s}"] >= LEARNT for s in "ab"}
    pairs["learnt"] = learnt["a"] & learnt["b"]
    pairs["learnable"] = learnt["a"] & ~learnt["b"]
    read = pairs[pairs["learnt"]] if learnt_only else pairs
    diff = read["ood_a"] - read["ood_b"]

    def flag(r):
        out = [run for run, used in ((r.run_a, r.used_a), (r.run_b, r.used_b)) if not used]
        unlearnt = [run for run, x, c in ((r.run_a, r.in_distribution_a, r.in_chance_a),
                                          (r.run_b, r.in_distribution_b, r.in_chance_b)) if x - c < LEARNT]
        notes = ([f"{', '.join(out)} diverged or not converged, counted as scored"] if out else []) + \
            ([f"{', '.join(unlearnt)} not learnt in distribution"] if unlearnt else [])
        return f" ({'; '.join(notes)})" if notes else ""

    per = "; ".join(f"{r.run_a}: {100 * r.ood_a:.1f} - {100 * r.ood_b:.1f} = {100 * (r.ood_a - r.ood_b):+.1f}"
                    f"{flag(r)}" for r in pairs.itertuples())
    mean, se = _mean_se(diff)
    ok = [d > MIN_GAIN for d in diff]
    verdict = _verdict(ok)
    smaller = paper_diff is not None and verdict == "holds" and mean < paper_diff / 2
    paper = f"; smaller if it holds with a mean under half the paper's {100 * paper_diff:+.1f}" if paper_diff else ""
    on = (f" of the pairs where both runs learnt (in distribution >= {100 * LEARNT:g} points above chance); a pair "
          "where only A learnt counts as n_learnable") if learnt_only else ""
    return {"claim": claim, "statement": statement, "a": a, "b": b, "n": len(read),
            "n_learnt": int(pairs["learnt"].sum()), "n_unlearnt": int((~pairs["learnt"]).sum()),
            "n_learnable": int(pairs["learnable"].sum()) if learnt_only else None,
            "a_ood": read["ood_a"].mean(), "b_ood": read["ood_b"].mean(),
            "a_above_chance": (read["ood_a"] - read["ood_chance_a"]).mean(),
            "b_above_chance": (read["ood_b"] - read["ood_chance_b"]).mean(),
            "diff": mean, "diff_se": se, "paper_diff": paper_diff, "p_sign": sign_p(ok), "per_run": per,
            "verdict": "smaller" if smaller else verdict,
            "rule": f"holds if A - B > {100 * MIN_GAIN:g} points OOD on every pair{on}, fails if on none{paper}"}


def labels(circuits: pd.DataFrame, variants: list[str], wanted: tuple[str, ...], claim: str, statement: str) -> dict:
    """A label claim: every labelled run of `variants` carries one of the circuits `wanted`; runs that show no
    mechanism (NO_MECHANISM) are counted apart."""
    c = circuits[circuits["variant"].isin(variants)]
    last = c["last_circuit"] if "last_circuit" in c else pd.Series(None, index=c.index, dtype=object)
    per = "; ".join(f"{r.variant} {r.run}: {r.circuit}{' (weak)' if str(getattr(r, 'weak', '')) == 'True' else ''}"
                    f" (before the read-out: {lc})" for r, lc in zip(c.itertuples(), last, strict=True))
    shown = c[~c["circuit"].isin(NO_MECHANISM)]
    hits = [circuit in wanted for circuit in shown["circuit"]]
    return {"claim": claim, "statement": statement, "a": ", ".join(variants), "b": "", "n": len(shown),
            "n_apart": len(c) - len(shown), "n_agree": int((c["circuit"] == last).sum()), "p_sign": sign_p(hits),
            "per_run": per, "verdict": _verdict(hits),
            "rule": f"holds if every run is labelled {' or '.join(wanted)} at its first spike (circuits.csv), fails "
                    f"if none is; runs labelled {' or '.join(NO_MECHANISM)} are neither (n_apart); n_agree: runs "
                    "whose label at the layer before the read-out is the same"}


def near_chance(runs: pd.DataFrame, variants: list[str], claim: str, statement: str) -> dict:
    """The claim "these variants fail beyond the training range": OOD within FAILS_WITHIN of chance."""
    r = runs[runs["variant"].isin(variants)]
    used = r[r["used"]]
    above = used["ood"] - used["ood_chance"]
    ok = [x <= FAILS_WITHIN for x in above]
    per = "; ".join(f"{x.variant} {x.run}: {100 * x.ood:.1f} ({100 * (x.ood - x.ood_chance):+.1f} above chance)"
                    for x in used.itertuples())
    return {"claim": claim, "statement": statement, "a": ", ".join(variants), "b": "", "n": len(used),
            "a_ood": used["ood"].mean(), "a_above_chance": above.mean(), "per_run": per + _left_out(r),
            "p_sign": sign_p(ok), "verdict": _verdict(ok),
            "rule": f"holds if every run's OOD accuracy is within {100 * FAILS_WITHIN:g} points of chance, fails if "
                    "none is"}


def learns(runs: pd.DataFrame, variant: str, order: str, claim: str, statement: str) -> dict:
    """The claim "this variant learns the task in distribution": accuracy at least LEARNT above chance (every
    run: a run below the convergence bar is exactly what this row is about)."""
    r = runs[runs["variant"] == variant]
    above = r["in_distribution"] - r["in_chance"]
    per = "; ".join(f"{x.run}: {100 * x.in_distribution:.1f} ({100 * (x.in_distribution - x.in_chance):+.1f} above "
                    f"chance)" for x in r.itertuples())
    return {"claim": claim, "statement": statement, "a": variant, "b": "", "order": order, "n": len(r),
            "a_in_distribution": r["in_distribution"].mean(), "a_above_chance": above.mean(), "per_run": per,
            "p_sign": sign_p([x >= LEARNT for x in above]), "verdict": _verdict([x >= LEARNT for x in above]),
            "rule": f"holds if every run answers {order} lists in distribution >= {100 * LEARNT:g} points above "
                    "chance, fails if none does"}


def combine(rows: list[dict], claim: str, statement: str, needs: dict[str, str]) -> dict:
    """A claim made of others: holds if each row named in `needs` has the verdict given, fails if none has."""
    by = {r["claim"]: r["verdict"] for r in rows}
    got = [by.get(c) for c in needs]
    ok = [v == want for v, want in zip(got, needs.values()) if v not in (None, "untested")]
    return {"claim": claim, "statement": statement, "a": "", "b": "", "n": len(ok),
            "per_run": "; ".join(f"{c}: {by.get(c, 'absent')}" for c in needs),
            "verdict": "untested" if len(ok) < len(needs) else _verdict(ok),
            "rule": "holds if " + ", ".join(f"{c} {w}" for c, w in needs.items()) + "; fails if none of them does"}


def _arm(belongs) -> list[str]:
    return [variant for variant, stage in VARIANT_STAGE.items() if belongs(stage)]


# The variants by arm, read from the declared stages (vlbind.core.stages): the text arm, the image arm, the curriculum
# control, the binding-loss control on its parent's task (text_bind_shuffled, on shuffled lists, asks another
# question: its own claim below).
IMAGE_ARM = _arm(lambda stage: stage in VISION_STAGES)
CURRICULUM_ARM = _arm(lambda stage: stage in CURRICULUM)
BIND_LOSS_ARM = _arm(lambda stage: stage in CONTROLS and not stage.endswith("_shuffled"))
NOISE_CONTROL_ARM = _arm(lambda stage: stage in NOISE_CONTROL)
TEXT_ARM = _arm(lambda stage: stage not in VISION_STAGES and stage not in CURRICULUM and stage not in CONTROLS
               and stage not in NOISE_CONTROL)

# The paper's mean OOD accuracy per variant (fig3, section D; text-only order shuffled) and its standard error where
# it gives one
PAPER_OOD = {"text_only": (0.372, 0.040), "noise_text": (0.575, 0.068), "image_text": (0.695, 0.033),
             "noise_image_text": (0.836, None)}


def _paper(a: str, b: str) -> str:
    return f"paper: {100 * PAPER_OOD[a][0]:.1f} vs {100 * PAPER_OOD[b][0]:.1f} %"


# "A > B out of distribution" claims (a, b, claim, statement[, the paper's difference]), by who asks them
PAPER_COMPARISONS = [  # fig3
    (a, b, claim, statement.format(paper=_paper(a, b)), PAPER_OOD[a][0] - PAPER_OOD[b][0])
    for a, b, claim, statement in [
        ("image_text", "text_only", "image_beats_text", "image_text > text_only out of distribution ({paper})"),
        ("noise_text", "text_only", "noise_helps_text", "noise helps the text arm: noise_text > text_only ({paper})"),
        ("noise_image_text", "noise_text", "noise_image_beats_noise_text", "noise_image_text > noise_text ({paper})"),
    ]]
CURRICULUM_COMPARISONS = [  # the curriculum control's
    ("image_text", "curriculum_text", "images_not_curriculum",
     "images, not the curriculum: image_text > curriculum_text (the image arm's stages, every context in text)"),
    ("noise_image_text", "noise_curriculum_text", "noise_images_not_curriculum",
     "images, not the curriculum, with noise: noise_image_text > noise_curriculum_text"),
    ("curriculum_text", "text_only", "curriculum_helps_text",
     "the image arm's curriculum without images raises text OOD: curriculum_text > text_only"),
]
BIND_LOSS_COMPARISONS = [  # the binding-loss control's
    ("text_bind", "text_only", "bind_loss_helps_text", "the binding loss alone raises text OOD: text_bind > text_only"),
    ("noise_text_bind", "noise_text", "bind_loss_helps_noise_text",
     "the binding loss alone raises noise_text OOD: noise_text_bind > noise_text"),
    ("image_text", "text_bind", "images_beyond_bind_loss", "images add to the binding loss: image_text > text_bind"),
    ("noise_image_text", "noise_text_bind", "noise_images_beyond_bind_loss",
     "images add to the binding loss with noise: noise_image_text > noise_text_bind"),
]

NOISE_CONTROL_COMPARISONS = [  # the noise control's (stages.NOISE_CONTROL)
    ("noise_text", "text_long", "noise_not_training",
     "noise, not more training: noise_text > text_long (text_s5 trained on as long as noise_text, without noise)"),
    ("text_long", "text_only", "training_helps_text", "more training raises text OOD: text_long > text_only"),
]

CONTROLLED = ("images_not_curriculum", "noise_images_not_curriculum")  # verdicts on learnt pairs (module doc)


def claims_table(evals: pd.DataFrame, circuits: pd.DataFrame) -> pd.DataFrame:
    """Every claim the variants present can test (README lists them), in the paper's order, then the control's.
    `evals`: evaluation tables of every variant (tables.read_eval_tables); `circuits`: circuits.csv."""
    orders = list(evals["order"].unique()) if "order" in evals else ["shuffled"]
    order = orders[0]
    runs = per_run(evals, order)
    have = set(runs["variant"])
    rows = []

    def present(variants):
        return [v for v in variants if v in have]

    def pair(a, b, claim, statement, paper_diff=None):  # a comparison needs both variants
        if {a, b} <= have:
            rows.append(compare(runs, a, b, claim, statement, paper_diff, learnt_only=claim in CONTROLLED))

    if text := present(TEXT_ARM):
        rows.append(labels(circuits, text, ("Positional",), "text_positional",
                           "text-only training binds by position (Positional)"))
        rows.append(near_chance(runs, text, "text_fails_ood",
                                "text-only models fail beyond the training range (OOD near chance)"))
    if images := present(IMAGE_ARM):
        rows.append(labels(circuits, images, SYMBOLIC_CIRCUITS, "images_symbolic",
                           "image training makes the model bind symbolically"))
    for comparison in PAPER_COMPARISONS:
        pair(*comparison)
    # the curriculum control: the image arm's stages without images (stages.CURRICULUM)
    if curriculum := present(CURRICULUM_ARM):
        rows.append(labels(circuits, curriculum, SYMBOLIC_CIRCUITS, "curriculum_symbolic",
                           "the image arm's curriculum without images makes the model bind symbolically"))
    if "curriculum_text" in have and "shuffled" in orders:
        rows.append(learns(per_run(evals, "shuffled"), "curriculum_text", "shuffled", "curriculum_learns_shuffled",
                           "the image arm's curriculum without images learns shuffled lists"))
    for comparison in CURRICULUM_COMPARISONS:
        pair(*comparison)
    # the binding-loss control: the text arm plus the image arm's binding loss (stages.CONTROLS)
    if controls := present(BIND_LOSS_ARM):
        rows.append(labels(circuits, controls, SYMBOLIC_CIRCUITS, "bind_loss_symbolic",
                           "the binding loss alone makes the text arm bind symbolically"))
    for comparison in BIND_LOSS_COMPARISONS:
        pair(*comparison)
    for comparison in NOISE_CONTROL_COMPARISONS:  # the noise control: noise_text's steps, no noise
        pair(*comparison)
    if "text_bind_shuffled" in have and "shuffled" in orders:
        rows.append(learns(per_run(evals, "shuffled"), "text_bind_shuffled", "shuffled",
                           "bind_loss_learns_shuffled", "with the binding loss, text training on shuffled lists "
                           "learns them"))
    if {"text_bind", "image_text"} <= have:
        rows.append(combine(rows, "bind_loss_does_what_images_do", "the binding loss alone does what images do",
                            {"bind_loss_symbolic": "holds", "bind_loss_helps_text": "holds",
                             "images_beyond_bind_loss": "fails"}))
    columns = ["claim", "statement", "order", "a", "b", "n", "n_apart", "n_agree", "n_learnt", "n_unlearnt",
               "n_learnable", "a_in_distribution", "a_ood", "b_ood",
               "a_above_chance", "b_above_chance", "diff", "diff_se", "paper_diff", "p_sign", "per_run", "verdict",
               "rule", "n_retried"]
    retried = runs.groupby("variant")["retries"].apply(lambda r: int((r > 0).sum())).to_dict() if len(runs) else {}
    for r in rows:  # runs of the row's variants whose training needed a retry (vlbind.training.attempts): disclosed
        r["n_retried"] = sum(retried.get(v, 0) for v in f"{r.get('a') or ''}, {r.get('b') or ''}".split(", "))
    return pd.DataFrame([{"order": order, **r} for r in rows]).reindex(columns=columns)

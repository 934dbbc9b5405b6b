"""The claims table: each verdict on scripted evaluation tables and circuit labels, recomputed by hand."""

import numpy as np
import pandas as pd
import pytest

from vlbind.evaluation.claims import FAILS_WITHIN, MIN_GAIN, claims_table

LENGTHS = range(2, 13)  # in distribution 2..8, OOD 9..12
OOD_CHANCE = np.mean([1 / n for n in range(9, 13)])


def runs(variant, ood, inside=0.97, order="fixed", image=False, converged=True):
    """Evaluation rows of one run per seed: accuracy `inside` on 2..8 objects and ood[seed] on 9..12."""
    rows = []
    for seed, acc in enumerate(ood):
        run = f"seed{seed}-enc" if image else f"seed{seed}"
        for n in LENGTHS:
            rows.append({"variant": variant, "run": run, "seed": seed, "order": order, "n_objects": n,
                         "accuracy": inside if n <= 8 else acc, "in_distribution": n <= 8, "diverged": False,
                         "converged": converged if seed == 0 else True})
    return rows


def circuits(labels: dict[str, list[str]]):
    return pd.DataFrame([{"variant": v, "run": f"seed{i}", "circuit": c, "weak": False}
                         for v, cs in labels.items() for i, c in enumerate(cs)],
                        columns=["variant", "run", "circuit", "weak"])


def verdicts(evals, labels=None):
    table = claims_table(pd.DataFrame(evals), circuits(labels or {}))
    return table.set_index("claim")


def test_a_comparison_holds_fails_or_is_mixed_by_the_paired_differences():
    text = [0.05, 0.06, 0.07]
    t = verdicts(runs("text_only", text) + runs("noise_text", [0.06, 0.07, 0.12])  # +1, +1, +5 points
                 + runs("image_text", [0.40, 0.30, 0.35], image=True)
                 + runs("noise_image_text", [0.06, 0.07, 0.08], image=True))     # 0, 0, -4 points
    assert t.loc["image_beats_text", "verdict"] == "holds"
    assert t.loc["noise_helps_text", "verdict"] == "mixed"            # one pair of three beyond MIN_GAIN
    assert t.loc["noise_image_beats_noise_text", "verdict"] == "fails"
    diff = np.subtract([0.40, 0.30, 0.35], text)
    row = t.loc["image_beats_text"]
    assert row["n"] == 3 and row["diff"] == pytest.approx(diff.mean())
    assert row["diff_se"] == pytest.approx(diff.std(ddof=1) / np.sqrt(3))
    assert row["a_above_chance"] == pytest.approx(0.35 - OOD_CHANCE)
    assert row["b_ood"] == pytest.approx(np.mean(text))
    assert "seed1-enc: 30.0 - 6.0 = +24.0" in row["per_run"]
    assert MIN_GAIN == 0.02


def test_gains_of_at_most_min_gain_fail():
    t = verdicts(runs("text_only", [0.05, 0.06]) + runs("noise_text", [0.06, 0.07]))
    assert t.loc["noise_helps_text", "verdict"] == "fails"


def test_a_comparison_counts_runs_left_out_of_means_as_they_scored_and_flags_them():
    """An image run that did not converge (seed 0: 0.0 OOD) is the arm's outcome: its pair counts against."""
    t = verdicts(runs("text_only", [0.05, 0.06, 0.07]) + runs("image_text", [0.0, 0.5, 0.5], image=True,
                                                               converged=False))
    row = t.loc["image_beats_text"]
    assert row["n"] == 3 and row["verdict"] == "mixed"
    assert "seed0-enc: 0.0 - 5.0 = -5.0 (seed0-enc diverged or not converged, counted as scored)" in row["per_run"]
    assert row["diff"] == pytest.approx(np.mean([-0.05, 0.44, 0.43]))
    assert row["p_sign"] == pytest.approx(0.5)  # 2 of 3 for: P(X >= 2) = 4 / 8


def test_a_comparison_that_holds_far_below_the_papers_size_is_smaller():
    """noise_text > text_only: the paper's +20.3 points; +3, +4, +5 here hold in direction only."""
    t = verdicts(runs("text_only", [0.05, 0.06, 0.07]) + runs("noise_text", [0.08, 0.10, 0.12]))
    row = t.loc["noise_helps_text"]
    assert row["verdict"] == "smaller" and row["paper_diff"] == pytest.approx(0.575 - 0.372)
    assert row["n"] == 3 and row["p_sign"] == pytest.approx(1 / 8)
    t = verdicts(runs("text_only", [0.05, 0.06, 0.07]) + runs("noise_text", [0.17, 0.18, 0.19]))  # +12: over half
    assert t.loc["noise_helps_text", "verdict"] == "holds"
    t = verdicts(runs("text_only", [0.05] * 4) + runs("text_bind", [0.08] * 4))  # no paper value: never smaller
    row = t.loc["bind_loss_helps_text"]
    assert row["verdict"] == "holds" and np.isnan(row["paper_diff"]) and row["p_sign"] == pytest.approx(1 / 16)


def test_runs_without_a_visible_mechanism_are_neither_for_nor_against_a_label_claim():
    evals = runs("image_text", [0.4, 0.4, 0.4], image=True) + runs("noise_image_text", [0.6] * 3, image=True)
    labels = {"image_text": ["none", "Symbolic-A", "Symbolic-A"],
              "noise_image_text": ["unresolved", "Symbolic-B", "Symbolic-A"]}
    row = verdicts(evals, labels).loc["images_symbolic"]
    assert (row["verdict"], row["n"], row["n_apart"]) == ("holds", 4, 2)
    assert row["p_sign"] == pytest.approx(1 / 16)
    labels["image_text"][1] = "Positional"
    row = verdicts(evals, labels).loc["images_symbolic"]
    assert (row["verdict"], row["n"], row["p_sign"]) == ("mixed", 4, pytest.approx(5 / 16))


def test_label_claims_and_the_text_arm_failing_beyond_training():
    evals = (runs("text_only", [OOD_CHANCE, OOD_CHANCE + 0.01]) + runs("noise_text", [OOD_CHANCE + 0.02] * 2)
             + runs("image_text", [0.4, 0.4], image=True) + runs("noise_image_text", [0.6, 0.6], image=True))
    labels = {"text_only": ["Positional", "Positional"], "noise_text": ["Positional", "Positional"],
              "image_text": ["Symbolic-A", "none"], "noise_image_text": ["Symbolic-A", "Symbolic-B"]}
    t = verdicts(evals, labels)
    assert t.loc["text_positional", "verdict"] == "holds"
    assert t.loc["images_symbolic", "verdict"] == "holds"  # image_text seed1 "none": counted apart
    assert t.loc["images_symbolic", "n_apart"] == 1
    assert t.loc["text_fails_ood", "verdict"] == "holds"
    t = verdicts(runs("text_only", [OOD_CHANCE + FAILS_WITHIN + 0.01] * 2)
                 + runs("noise_text", [OOD_CHANCE + 0.2] * 2), {"text_only": ["Symbolic-A"] * 2,
                                                                  "noise_text": ["unresolved"] * 2})
    assert t.loc["text_positional", "verdict"] == "fails" and t.loc["text_fails_ood", "verdict"] == "fails"
    assert (t.loc["text_positional", "n"], t.loc["text_positional", "n_apart"]) == (2, 2)  # unresolved: apart


def test_a_claim_without_labelled_runs_is_untested_and_absent_variants_give_no_row():
    t = verdicts(runs("text_only", [0.05]) + runs("noise_text", [0.05]))
    assert t.loc["text_positional", "verdict"] == "untested"
    assert "image_beats_text" not in t.index


def test_the_control_arm_answers_whether_the_binding_loss_does_what_images_do():
    base = runs("text_only", [0.05, 0.06]) + runs("image_text", [0.40, 0.45], image=True)
    shuffled = runs("text_bind_shuffled", [0.05, 0.05], inside=0.97, order="fixed")
    shuffled += runs("text_bind_shuffled", [0.04, 0.04], inside=0.24, order="shuffled")
    like_images = base + runs("text_bind", [0.39, 0.46]) + shuffled
    t = verdicts(like_images, {"text_bind": ["Symbolic-A", "Symbolic-A"]})
    assert t.loc["bind_loss_helps_text", "verdict"] == "holds"
    assert t.loc["images_beyond_bind_loss", "verdict"] == "fails"  # +1, -1 points
    assert t.loc["bind_loss_does_what_images_do", "verdict"] == "holds"
    assert t.loc["bind_loss_learns_shuffled", "verdict"] == "fails"  # 0.24 in distribution, chance ~0.26
    assert t.loc["bind_loss_learns_shuffled", "order"] == "shuffled"
    unlike = base + runs("text_bind", [0.05, 0.06])
    t = verdicts(unlike, {"text_bind": ["Positional", "Positional"]})
    assert t.loc["bind_loss_does_what_images_do", "verdict"] == "fails"
    assert t.loc["bind_loss_symbolic", "verdict"] == "fails"


def test_the_curriculum_control_answers_images_or_curriculum_and_a_stalled_run_counts_as_scored():
    """curriculum_text (the image arm's stages, every context in text) beside image_text, paired by seed. Seed 0 of
    the control stalled (not converged, OOD at chance): it is the curriculum's outcome, so it counts for "images,
    not the curriculum" and against "the curriculum learns shuffled lists", flagged, never dropped."""
    base = runs("text_only", [0.05, 0.06, 0.05]) + runs("image_text", [0.37, 0.21, 0.24], image=True)
    stalled = runs("curriculum_text", [0.05, 0.30, 0.10], converged=False)
    stalled += runs("curriculum_text", [0.25, 0.97, 0.97], order="shuffled")  # 2..8 in distribution: 0.25, chance
    stalled = [r if r["order"] == "fixed" or r["seed"] or not r["in_distribution"] else {**r, "accuracy": 0.25}
               for r in stalled]
    t = verdicts(base + stalled, {"curriculum_text": ["none", "Symbolic-A", "Positional"]})
    row = t.loc["images_not_curriculum"]
    assert row["verdict"] == "mixed" and row["n"] == 3  # +32, -9, +14 points: the stalled pair is in
    assert row["diff"] == pytest.approx(np.mean([0.37 - 0.05, 0.21 - 0.30, 0.24 - 0.10]))
    assert "seed0-enc: 37.0 - 5.0 = +32.0 (seed0 diverged or not converged, counted as scored)" in row["per_run"]
    assert t.loc["curriculum_helps_text", "verdict"] == "mixed"  # 0, +24, +5 points
    assert t.loc["curriculum_learns_shuffled", "verdict"] == "mixed"  # seed 0 at chance on shuffled lists
    assert t.loc["curriculum_learns_shuffled", "order"] == "shuffled"
    labels = t.loc["curriculum_symbolic"]
    assert (labels["verdict"], labels["n"], labels["n_apart"]) == ("mixed", 2, 1)  # "none" counted apart
    t = verdicts(base + runs("curriculum_text", [0.05, 0.06, 0.05]))
    assert t.loc["images_not_curriculum", "verdict"] == "holds" and t.loc["images_not_curriculum", "p_sign"] == 0.125


def test_the_controls_verdict_rests_on_learnt_pairs_and_counts_a_pair_only_images_learnt_apart():
    """Seed 0's curriculum run is at chance in distribution (0.25 on 2..8 objects, chance ~0.25): its pair says that
    images make the task learnable, not that they beat a model of the same skill. The control's verdict reads the two
    learnt pairs (+16, +14 points: holds), counts the third as n_learnable; image_beats_text reads every pair and
    says how many are learnt."""
    base = runs("text_only", [0.05, 0.06, 0.05], inside=0.3) + runs("image_text", [0.37, 0.21, 0.24], image=True)
    control = [r if r["seed"] or not r["in_distribution"] else {**r, "accuracy": 0.25}
               for r in runs("curriculum_text", [0.05, 0.05, 0.10])]
    t = verdicts(base + control)
    row = t.loc["images_not_curriculum"]
    assert (row["verdict"], row["n"], row["n_learnt"], row["n_unlearnt"], row["n_learnable"]) == ("holds", 2, 2, 1, 1)
    assert row["diff"] == pytest.approx(np.mean([0.21 - 0.05, 0.24 - 0.10]))
    assert "seed0-enc: 37.0 - 5.0 = +32.0 (seed0 not learnt in distribution)" in row["per_run"]
    assert "both runs learnt" in row["rule"]
    plain = t.loc["image_beats_text"]  # text_only answers 0.3 in distribution: below LEARNT above chance
    assert (plain["n"], plain["n_learnt"], plain["n_unlearnt"]) == (3, 0, 3) and pd.isna(plain["n_learnable"])


def test_a_label_claim_says_on_how_many_runs_the_two_readings_agree():
    labels = circuits({"text_only": ["Symbolic-A", "Positional", "Positional"]})
    labels["last_circuit"] = ["Positional", "Positional", "none"]
    table = claims_table(pd.DataFrame(runs("text_only", [0.05, 0.06, 0.05])), labels).set_index("claim")
    row = table.loc["text_positional"]
    assert (row["verdict"], row["n"], row["n_agree"]) == ("mixed", 3, 1)
    assert "seed0: Symbolic-A (before the read-out: Positional)" in row["per_run"]

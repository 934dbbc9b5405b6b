"""The retry rule (training.attempts): a failed attempt retries from the unit's starting weights, a first-attempt pass
is a stage without the rule, a kill resumes inside any attempt, and the stall rule as replayed on recorded curves is the
one the training loop applies."""

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from vlbind import config as vlconfig
from vlbind import params as vlparams
from vlbind.core.schema import schema_defaults
from vlbind.core.settings import NON_FINITE
from vlbind.data.spec import StageSpec
from vlbind.evaluation.tables import training_summary
from vlbind.model.checkpoint import load_model
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.attempts import expected_steps_to_pass, stall_end, train_stage, train_unit
from vlbind.training.config import TrainConfig
from vlbind.training.loop import _Progress, train_attempt

TINY = ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=2, vocab_size=480)
SPEC = StageSpec(8, 8, 8, 2, 3, shuffle=True)
# target 0: every attempt that validates finitely passes at its first validation (step 3)
CFG = TrainConfig(queries="one", lr=3e-3, warmup_steps=4, batch_size=8, eval_every=3, val_size=16, max_steps=12,
                  checkpoint_every=3, target_accuracy=0.0, patience=100, max_skipped_steps=0, attempts=3)


def fresh(seed=0):
    torch.manual_seed(seed)
    return Transformer(TINY)


def same(a, b):
    return all(torch.equal(a.state_dict()[k], v) for k, v in b.state_dict().items())


class Kill(Exception):
    pass


def poison_first_attempt(model, calls):
    """A callback that makes the first attempt's weights NaN at its step 1 (every later step is non-finite: with no
    skipped step allowed the attempt ends at its first validation with no finite one, below any bar)."""
    def callback(step):
        calls.append(step)
        if len(calls) == 1:
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))
    return callback


def test_a_failed_attempt_retries_from_the_starting_weights_and_the_retry_is_the_stage_trained_by_hand(tmp_path):
    model, calls = fresh(), []
    meta = train_unit(model, SPEC, CFG, tmp_path / "run", stage="text_s2", callback=poison_first_attempt(model, calls))
    assert [(a["attempt"], a["steps"], a["stopped_because"]) for a in meta["attempts"]] == [
        (1, 3, NON_FINITE), (2, 3, "target_accuracy")]
    assert math.isnan(meta["attempts"][0]["best_val_accuracy"])
    assert (meta["attempt"], meta["steps"], meta["stopped_because"]) == (2, 6, "target_accuracy")
    # attempt 2 by hand: the unit's starting weights, the cap less attempt 1's steps, a fresh stream, lr x 0.3
    by_hand = fresh()
    hand = train_attempt(by_hand, SPEC, replace(CFG, max_steps=9, attempt=2, lr=CFG.lr * 0.3), tmp_path / "hand",
                       stage="text_s2")
    assert same(model, by_hand) and hand["best_val_accuracy"] == meta["best_val_accuracy"]
    loaded, saved = load_model(tmp_path / "run")
    assert same(loaded, by_hand) and (saved["attempt"], saved["steps"]) == (2, 6)
    curve = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    assert list(curve["attempt"]) == [1, 2] and list(curve["step"]) == [3, 3]
    assert training_summary([tmp_path / "run" / "meta.json"]).iloc[0]["attempts"] == 2
    again, calls2 = fresh(), []  # deterministic: the same failure, the same retry, the same weights
    train_unit(again, SPEC, CFG, tmp_path / "again", stage="text_s2", callback=poison_first_attempt(again, calls2))
    assert same(again, model)


def test_a_retry_draws_another_data_stream_than_the_first_attempt(tmp_path):
    a, b = fresh(), fresh()
    train_attempt(a, SPEC, replace(CFG, target_accuracy=None), tmp_path / "a", stage="text_s2")
    train_attempt(b, SPEC, replace(CFG, target_accuracy=None, attempt=2), tmp_path / "b", stage="text_s2")
    assert not same(a, b)


def test_a_first_attempt_that_passes_is_the_stage_without_the_rule(tmp_path):
    ruled, plain = fresh(), fresh()
    meta = train_unit(ruled, SPEC, CFG, tmp_path / "ruled", stage="text_s2")
    ref = train_attempt(plain, SPEC, replace(CFG, attempts=1), tmp_path / "plain", stage="text_s2")
    assert same(ruled, plain)
    assert (meta["attempt"], len(meta["attempts"])) == (1, 1)
    for key in ("steps", "best_step", "best_val_accuracy", "kept_step", "stopped_because", "val_chance"):
        assert meta[key] == ref[key], key
    ours, theirs = (pd.read_parquet(tmp_path / d / "metrics.parquet") for d in ("ruled", "plain"))
    timing = ["steps_per_s"]
    pd.testing.assert_frame_equal(ours.drop(columns=timing), theirs.drop(columns=timing))
    assert list(ours["attempt"]) == [1]


def test_a_kill_in_attempt_2_resumes_to_the_same_weights_without_training_attempt_1_again(tmp_path):
    cfg = replace(CFG, target_accuracy=1.0, stall_steps=3, stall_gain=1.0)  # each attempt stalls at step 6
    ref = fresh()
    done = train_unit(ref, SPEC, replace(cfg, max_steps=15), tmp_path / "ref", stage="text_s2")
    assert [a["steps"] for a in done["attempts"]] == [6, 6, 15]  # stalled attempts give their steps back

    calls = []

    def die(step):
        calls.append(step)
        if len(calls) == 6 + 5:  # step 5 of attempt 2, after its checkpoint at 3
            raise Kill

    with pytest.raises(Kill):
        train_unit(fresh(), SPEC, replace(cfg, max_steps=15), tmp_path / "run", stage="text_s2", callback=die)
    calls.clear()
    rerun = fresh()
    meta = train_unit(rerun, SPEC, replace(cfg, max_steps=15), tmp_path / "run", stage="text_s2", callback=calls.append)
    assert calls == [4, 5, 6, *range(1, 16)]  # attempt 2 from its step-3 state, then attempt 3
    assert same(rerun, ref) and meta["attempts"] == done["attempts"]


def test_attempts_that_end_unstalled_share_the_cap_and_the_best_is_kept_when_none_passes(tmp_path):
    cfg = replace(CFG, target_accuracy=1.0, stall_steps=None, max_steps=12, patience=1)
    meta = train_unit(fresh(), SPEC, cfg, tmp_path, stage="text_s2")
    # the plateau rule (no gain in 3 steps) ends attempt 1, which does not stall: its steps stay counted
    assert [(a["steps"], a["stopped_because"]) for a in meta["attempts"]] == [(6, "plateau"), (6, "max_steps")]
    assert meta["steps"] == 12  # the cap; attempt 3 had no step left
    accs = [a["best_val_accuracy"] for a in meta["attempts"]]
    assert meta["attempt"] == 1 + int(np.argmax(accs)) and meta["best_val_accuracy"] == max(accs)
    row = training_summary([tmp_path / "meta.json"]).iloc[0]  # training.csv: the kept attempt's stop, the stage's end
    assert row["stopped_because"] == meta["attempts"][meta["attempt"] - 1]["stopped_because"]
    assert row["ended_because"] == "max_steps"
    stalling = replace(cfg, stall_steps=3, stall_gain=1.0, patience=100)
    last = train_unit(fresh(), SPEC, replace(stalling, attempts=1), tmp_path / "one", stage="text_s2")
    assert last["stopped_because"] == "max_steps"  # no retry left: the stall rule never ends the last attempt


def test_a_ramp_retries_a_length_from_the_last_length_s_weights_and_counts_its_steps_in_the_cap(tmp_path):
    spec = StageSpec(8, 8, 8, 2, 4, shuffle=True)
    cfg = replace(CFG, ramp=True, max_steps=30)
    model, calls = fresh(), []
    meta = train_stage(model, spec, cfg, tmp_path, stage="text_s4", callback=poison_first_attempt(model, calls))
    assert [(r["max_objects"], r["steps"], r["attempts"]) for r in meta["ramp"]] == [(2, 6, 2), (3, 3, 1)]
    assert meta["ramp_steps"] == 9 and (tmp_path / "ramp" / "n2" / "attempts" / "a2" / "meta.json").is_file()
    row = training_summary([tmp_path / "meta.json"]).iloc[0]
    assert row["attempts"] == 1 and row["ramp_retries"] == 1


# Seed 1's 2..3 length of text_s4 on a bf16 CPU (../shared/runs/mini-5ad55f4-bf16, validation every 250 steps): at
# 0.80-0.84 from step 250 to 5,000, then a jump to 0.98 at 6,500 (gains of 0.01: at 1,500 and 5,000).
HOVER_THEN_JUMP = [0.7930, 0.8008, 0.8027, 0.8027, 0.7852, 0.8301, 0.8184, 0.8320, 0.8301, 0.8086, 0.8125, 0.8145,
                   0.8301, 0.8242, 0.8125, 0.8027, 0.8203, 0.8105, 0.8086, 0.8418, 0.8320, 0.8711, 0.9395, 0.9434,
                   0.9473, 0.9824]


def test_the_stall_rule_on_a_recorded_hover_ends_it_before_its_jump_at_3000_steps_and_not_at_3500():
    steps, acc = 250 * np.arange(1, len(HOVER_THEN_JUMP) + 1), np.array(HOVER_THEN_JUMP)
    assert stall_end(steps, acc, 0.95, 3000, 0.01) == 4500  # 3,000 steps after its gain at 1,500
    assert stall_end(steps, acc, 0.95, 3500, 0.01) is None  # the gain at 5,000 comes first; it passes at 6,500
    curve = pd.DataFrame({"step": steps, "val_accuracy": acc})
    # alone, retried without end: every attempt ended at 4,500 fails
    assert expected_steps_to_pass([curve], 0.95, 3000, 0.01) == math.inf
    assert expected_steps_to_pass([curve], 0.95, 3500, 0.01) == 6500
    quick = pd.DataFrame({"step": [250, 500], "val_accuracy": [0.9, 0.96]})
    assert expected_steps_to_pass([curve, quick], 0.95, 3000, 0.01) == (4500 + 500) / 1  # one pass in two draws


@pytest.mark.parametrize("window", [1000, 3000, 3500])
def test_the_training_loop_s_stall_rule_is_the_replayed_one(window):
    """_Progress.validate, fed the recorded validations, stops where stall_end says."""
    cfg = TrainConfig(eval_every=250, target_accuracy=0.95, patience=10**6, attempts=2, stall_steps=window,
                      stall_gain=0.01)
    progress, stop_at = _Progress(best_state={}), None
    zero = torch.zeros(1)
    for i, acc in enumerate(HOVER_THEN_JUMP, 1):
        progress.step = 250 * i
        if progress.validate(torch.nn.Linear(1, 1), acc, zero, zero, zero, 1.0, cfg, 0.4) is not None:
            stop_at = progress.step if progress.history[-1]["val_accuracy"] < 0.95 else None
            break
    steps = 250 * np.arange(1, len(HOVER_THEN_JUMP) + 1)
    assert stop_at == stall_end(steps, np.array(HOVER_THEN_JUMP), 0.95, window, 0.01)


def test_the_seed_table_counts_passes_at_the_first_attempt_and_with_retries_and_steps_to_target(tmp_path):
    from vlbind.core.files import write_json
    from vlbind.evaluation.tables import seed_table, unit_outcomes

    cfg = {"target_accuracy": 0.95, "pass_accuracy": 0.95}
    runs = {  # per seed: the 2..2 length (steps, best, attempts), then the stage's own (steps, best, attempts)
        0: ((500, 0.99, 1), (700, 0.96, 1)),  # passes both at the first attempt
        1: ((3500, 0.97, 2), (900, 0.951, 1)),  # the length needed a retry
        2: ((400, 0.98, 1), (9000, 0.91, 3)),  # the stage never passed
    }
    paths = []
    for seed, ((ls, lb, la), (ss, sb, sa)) in runs.items():
        meta = {"stage": "text_s4", "train_config": cfg, "steps": ss, "best_val_accuracy": sb, "ramp_steps": ls,
                "ramp": [{"max_objects": 2, "steps": ls, "best_val_accuracy": lb, "attempts": la}],
                **({"attempts": [{}] * sa} if sa > 1 else {})}
        paths.append(tmp_path / f"seed{seed}" / "text_s4" / "meta.json")
        write_json(paths[-1], meta)
    table = seed_table(unit_outcomes(paths), ["text_s4"]).set_index("unit")
    assert list(table.index) == ["text_s4_n2", "text_s4"]
    n2, own = table.loc["text_s4_n2"], table.loc["text_s4"]
    assert (n2["runs"], n2["first_attempt_pass"], n2["pass_with_retries"], n2["retried_runs"]) == (3, 2 / 3, 1.0, 1)
    assert (n2["median_steps_to_target"], n2["max_steps_to_target"]) == (500, 3500)
    assert (own["first_attempt_pass"], own["pass_with_retries"], own["retried_runs"]) == (2 / 3, 2 / 3, 1)
    # the stage's own row counts the whole stage: its ramp, then its own length (seeds 0 and 1 passed)
    assert (own["median_steps_to_target"], own["max_steps_to_target"]) == ((1200 + 4400) / 2, 4400)


@pytest.mark.parametrize("reuse, key", [({"tree": "/elsewhere/results", "stages": ["image"]}, "reuse.stages"),
                                        ({"tree": None, "stages": ["text_s3"]}, "reuse.tree")])
def test_an_experiment_reuses_text_stages_of_a_named_tree_or_the_config_says_what_is_wrong(reuse, key):
    from pathlib import Path

    from vlbind import config as vlconfig

    root = Path(__file__).resolve().parents[1]
    cfg = vlconfig.load([root / "config/config.yaml", root / "config/smoke.yaml"])
    with pytest.raises(vlconfig.ConfigError, match=key.replace(".", r"\.")):
        vlconfig.validate({**cfg, "reuse": reuse})


RETRIES = Path(__file__).resolve().parents[1] / "docs/results/retries/curves"


def stall_settings(files: list[str], stage: str) -> tuple[int, float]:
    """A stage's resolved (stall_steps, stall_gain): its config's, else the schema's default."""
    root = Path(__file__).resolve().parents[1]
    train = vlparams.stage_train(vlconfig.load([root / f for f in files]), stage)
    defaults = schema_defaults("train")
    return tuple(train.get(k, defaults[k]) for k in ("stall_steps", "stall_gain"))


def naive_stall_end(steps, acc, bar, window, gain):
    """The stall rule written out another way: at each validation, the last validation that gained `gain` over the
    one before it (a running reference), and whether `window` steps have passed since it."""
    ref = 0
    for i in range(len(acc)):
        if acc[i] >= bar:
            return None
        if i and acc[i] >= acc[ref] + gain:
            ref = i
        if steps[i] - steps[ref] >= window:
            return int(steps[i])
    return None


def test_mini_s_stall_rule_ends_its_recorded_curves_where_it_did():
    """mini keeps the window calibrated on its curves (docs/results/retries.md): on the 85 recorded attempts of the
    two mini runs at 5ad55f4 the rule at mini's resolved settings ends the attempts it ended when calibrated, and the
    expected steps to pass over the units that pass are that page's 39,416."""
    df = pd.read_csv(RETRIES / "mini-5ad55f4.csv")
    window, gain = stall_settings(["config/config.yaml", "config/mini.yaml"], "text_s3")
    assert (window, gain) == stall_settings(["config/config.yaml", "config/mini.yaml"], "text_s4") == (3000, 0.01)
    ends, pools = {}, {}
    for (log, unit), g in df.groupby(["log", "unit"]):
        bar = 0.95 if unit.startswith(("text_s3", "text_s4")) else 0.98
        steps, acc = g["step"].to_numpy(), g["val_accuracy"].to_numpy()
        ends[log, unit] = stall_end(steps, acc, bar, window, gain)
        assert ends[log, unit] == naive_stall_end(steps, acc, bar, window, gain)
        pools.setdefault(unit, (bar, []))[1].append(g)
    assert len(ends) == 85 and {k: e for k, e in ends.items() if e is not None} == {  # retries.md's list
        ("h200-mini-8seeds-5ad55f4/seed0/text_s3.log", "text_s3"): 5250,
        ("h200-mini-8seeds-5ad55f4/seed1/text_s3.log", "text_s3"): 12750,
        ("h200-mini-8seeds-5ad55f4/seed5/text_s4.log", "text_s4_n4"): 4750,
        ("h200-mini-8seeds-5ad55f4/seed7/text_s4.log", "text_s4_n3"): 4250,
        ("mini-5ad55f4-bf16/seed0/text_s4.log", "text_s4_n4"): 4000,
        ("mini-5ad55f4-bf16/seed1/text_s4.log", "text_s4_n3"): 4500,
        ("mini-5ad55f4-bf16/seed2/noise_text.log", "noise_text"): 7250}
    total = [expected_steps_to_pass(curves, bar, window, gain) for bar, curves in pools.values()]
    assert round(sum(t for t in total if math.isfinite(t))) == 39416


def test_the_paper_config_s_stall_window_ends_no_recorded_paper_size_escape():
    """At the paper's size (config.yaml's resolved settings, bar pass_accuracy 0.95) no recorded curve that passed or
    was still rising when it stopped is ended; a window of mini's 3,000 would end one (the H100's text_s1, seed 0)."""
    df = pd.read_csv(RETRIES / "paper-size.csv")
    for _, g in df.groupby("curve"):
        stage, escape = g["stage"].iloc[0], g["escape"].iloc[0] == "yes"
        window, gain = stall_settings(["config/config.yaml"], stage)
        steps, acc = g["step"].to_numpy(), g["val_accuracy"].to_numpy()
        end = stall_end(steps, acc, 0.95, window, gain)
        assert end == naive_stall_end(steps, acc, 0.95, window, gain)
        assert not (escape and end is not None), g.iloc[0].to_dict()
    ended_at_3000 = [g["curve"].iloc[0] for _, g in df.groupby("curve") if g["escape"].iloc[0] == "yes" and
                     stall_end(g["step"].to_numpy(), g["val_accuracy"].to_numpy(), 0.95, 3000, 0.01) is not None]
    assert ended_at_3000 == [2]


def test_a_noise_control_trains_as_long_as_its_twins_kept_weights_and_keeps_its_last_step(tmp_path):
    """attempts.as_long_as: from a twin that kept its second attempt (the first poisoned), the control trains the
    steps of the weights it kept at that attempt's lr (0.3 x), one attempt, no stop before its last step, and keeps
    that step's weights whatever its validation does."""
    from vlbind.training.attempts import as_long_as

    model, calls = fresh(), []
    twin = train_unit(model, SPEC, CFG, tmp_path / "twin", stage="noise_text",
                      callback=poison_first_attempt(model, calls))
    assert (twin["attempt"], twin["attempts"][1]["steps"], twin["kept_step"]) == (2, 3, 3)
    control = as_long_as(replace(CFG, target_accuracy=0.0, patience=1), twin)
    assert (control.max_steps, control.lr, control.attempts, control.target_accuracy, control.keep) == (
        3, CFG.lr * 0.3, 1, None, "last")
    # the control of a twin that kept step 9, at an lr (0.3) at which it validates best at its first validation
    longer = as_long_as(replace(CFG, target_accuracy=0.0, patience=1), {**twin, "kept_step": 9})
    meta = train_unit(fresh(), SPEC, replace(longer, lr=0.3), tmp_path / "long", stage="text_long")
    assert meta["steps"] == 9 and meta["stopped_because"] == "max_steps"  # patience 1 would have stopped it at 6
    assert meta["best_step"] < 9 and meta["kept_step"] == 9  # the last step's weights, not the best validation's
    # a twin that trained past the weights it kept (keep: best): the control trains to those weights' step only
    plain = {k: v for k, v in twin.items() if k not in ("attempts", "attempt")}
    assert as_long_as(CFG, {**plain, "steps": 7000, "kept_step": 4750}).max_steps == 4750
    with pytest.raises(ValueError, match="ramp"):
        as_long_as(CFG, {**plain, "stage": "text_s4", "ramp": [{"max_objects": 2}]})

"""Training: resume after a kill, determinism, schedule, and evaluation that never mutates the model."""

import json
import logging
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
from test_tasks import keys_in_context_order, solve

from vlbind.core.settings import NON_FINITE
from vlbind.core.vocab import VOCAB
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import BY_COLOR, RETRIEVAL, Role, generate, prompt_text
from vlbind.evaluation.evaluate import EVAL_SPEC, EvalConfig, evaluate
from vlbind.evaluation.outcomes import ood_average
from vlbind.evaluation.tables import training_summary
from vlbind.model.checkpoint import load_model
from vlbind.model.transformer import ModelConfig, Transformer
from vlbind.training.attempts import train_stage
from vlbind.training.config import TrainConfig
from vlbind.training.loop import train_attempt
from vlbind.training.optim import lr_at, make_optimizer, optimizer_step
from vlbind.training.resume import RESUME_FILE, resume_weights

TINY = ModelConfig(n_layers=2, d_model=32, d_ff=64, n_heads=2, vocab_size=480)
SPEC = StageSpec(8, 8, 8, 2, 3, shuffle=True)
CFG = TrainConfig(queries="one", lr=3e-3, warmup_steps=4, batch_size=8, eval_every=3, val_size=16, max_steps=12,
                  checkpoint_every=3, target_accuracy=None, patience=100)


def fresh(seed=0):
    torch.manual_seed(seed)
    return Transformer(TINY)


def weights(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


class Kill(Exception):
    pass


DENSE_CFG = TrainConfig(**{**CFG.__dict__, "queries": "all"})


def kill_at(step: int, out_dir, spec=SPEC, cfg=CFG) -> None:
    """Train a fresh model in `out_dir` and kill it after `step` (its resume state saved every 3 steps)."""
    def die(s):
        if s == step:
            raise Kill

    with pytest.raises(Kill):
        train_attempt(fresh(), spec, cfg, out_dir, stage="text_s1", callback=die)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A fresh model trained uninterrupted with SPEC and CFG, once for the tests that compare a run with it: its
    directory and the trained model."""
    out, model = tmp_path_factory.mktemp("reference"), fresh()
    train_attempt(model, SPEC, CFG, out, stage="text_s1")
    return out, model


@pytest.mark.parametrize("cfg", [CFG, DENSE_CFG], ids=["plain", "dense"])
def test_resume_after_kill_reaches_the_uninterrupted_weights(tmp_path, reference, cfg):
    if cfg is CFG:
        ref_dir, ref = reference
    else:
        ref_dir, ref = tmp_path / "ref", fresh()
        train_attempt(ref, SPEC, cfg, ref_dir, stage="text_s1")
    kill_at(8, tmp_path / "run", SPEC, cfg)
    assert (tmp_path / "run" / RESUME_FILE).is_file()
    assert not (tmp_path / "run" / "model.safetensors").exists()
    meta = train_attempt(fresh(), SPEC, cfg, tmp_path / "run", stage="text_s1")
    assert meta["resumed"] and not (tmp_path / "run" / RESUME_FILE).exists()
    resumed, _ = load_model(tmp_path / "run")
    for k, v in ref.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k
    a = pd.read_parquet(ref_dir / "metrics.parquet")
    b = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    pd.testing.assert_series_equal(a["val_accuracy"], b["val_accuracy"])
    pd.testing.assert_series_equal(a["train_loss"], b["train_loss"])


def sigterm_at(step: int):
    """A callback that sends this process SIGTERM after `step`, as a scheduler stopping the job would."""
    import os
    import signal

    def send(s):
        if s == step:
            os.kill(os.getpid(), signal.SIGTERM)
    return send


@pytest.mark.parametrize("at", [8, 9], ids=["between validations", "at a validation"])
def test_sigterm_saves_the_step_it_ends_and_the_resumed_run_repeats_none_to_the_uninterrupted_one(tmp_path,
                                                                                                    reference, at):
    import signal

    from vlbind.model.checkpoint import read_metadata

    ref_dir, ref = reference  # CFG validates and saves every 3 steps: step 8 lies two steps after the save at 6
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stop:
        train_attempt(fresh(), SPEC, CFG, tmp_path, stage="text_s1", callback=sigterm_at(at))
    assert stop.value.code == 128 + signal.SIGTERM and signal.getsignal(signal.SIGTERM) is handler
    saved = read_metadata(tmp_path / RESUME_FILE)
    assert saved["step"] == at and len(saved["pending_losses"]) == at % CFG.eval_every
    meta = train_attempt(fresh(), SPEC, CFG, tmp_path, stage="text_s1")
    assert meta["resumed"] and meta["steps"] == CFG.max_steps
    resumed, _ = load_model(tmp_path)
    for k, v in ref.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k
    a, b = (pd.read_parquet(d / "metrics.parquet") for d in (ref_dir, tmp_path))
    pd.testing.assert_frame_equal(a.drop(columns="steps_per_s"), b.drop(columns="steps_per_s"))


def test_sigterm_in_the_step_that_ends_an_attempt_keeps_its_state_and_the_rerun_writes_its_files(tmp_path, reference):
    """A stop in an attempt's last step: the job exits 143 before its files (Snakemake deletes a failed job's outputs:
    files written then were lost, and the rerun trained from step 0), its state saved marked ended; the rerun trains
    no step and writes the uninterrupted run's weights and curve."""
    import signal

    ref_dir, ref = reference
    with pytest.raises(SystemExit) as stop:
        train_attempt(fresh(), SPEC, CFG, tmp_path, stage="text_s1", callback=sigterm_at(CFG.max_steps))
    assert stop.value.code == 128 + signal.SIGTERM and not (tmp_path / "model.safetensors").exists()
    steps = []
    meta = train_attempt(fresh(), SPEC, CFG, tmp_path, stage="text_s1", callback=steps.append)
    assert steps == [] and meta["resumed"] and meta["steps"] == CFG.max_steps
    assert not (tmp_path / RESUME_FILE).exists()
    done, _ = load_model(tmp_path)
    for k, v in ref.state_dict().items():
        assert torch.equal(done.state_dict()[k], v), k
    a, b = (pd.read_parquet(d / "metrics.parquet") for d in (ref_dir, tmp_path))
    pd.testing.assert_frame_equal(a.drop(columns="steps_per_s"), b.drop(columns="steps_per_s"))


@pytest.mark.parametrize("cfg", [CFG, DENSE_CFG], ids=["plain", "dense"])
def test_a_stage_with_a_start_resumes_after_a_kill_to_the_uninterrupted_weights(tmp_path, cfg):
    start = (StageSpec(8, 8, 8, 2, 2, shuffle=False), 5)  # a stage start switches the task mid-stream
    whole = fresh()
    meta = train_attempt(whole, SPEC, cfg, tmp_path / "whole", stage="text_s1", start=start)

    def die(s):
        if s == 8:
            raise Kill

    with pytest.raises(Kill):  # killed after the start's batches, two steps past the saved state
        train_attempt(fresh(), SPEC, cfg, tmp_path / "killed", stage="text_s1", start=start, callback=die)
    resumed = fresh()
    assert train_attempt(resumed, SPEC, cfg, tmp_path / "killed", stage="text_s1", start=start)["resumed"]
    for k, v in whole.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k
    assert meta["steps"] == cfg.max_steps


def test_resume_weights_are_the_running_models_at_its_last_save(tmp_path):
    run, seen = fresh(), {}

    def die(step):
        seen[step] = weights(run)  # after the step's update, before its save (checkpoint_every 3)
        if step == 8:
            raise Kill

    with pytest.raises(Kill):
        train_attempt(run, SPEC, CFG, tmp_path / "run", stage="text_s1", callback=die)
    saved = resume_weights(tmp_path / "run" / RESUME_FILE)
    assert saved.keys() == seen[6].keys()
    for k, v in seen[6].items():
        assert torch.equal(saved[k], v), k
    assert any(not torch.equal(saved[k], v) for k, v in seen[8].items())


def test_resume_state_from_other_settings_is_ignored(tmp_path):
    kill_at(7, tmp_path)
    other = TrainConfig(**{**CFG.__dict__, "lr": 1e-3})
    meta = train_attempt(fresh(), SPEC, other, tmp_path, stage="text_s1")
    assert not meta["resumed"]


def test_raising_the_step_cap_resumes_and_matches_a_run_with_that_cap(tmp_path):
    longer = TrainConfig(**{**CFG.__dict__, "max_steps": 15})
    ref = fresh()
    train_attempt(ref, SPEC, longer, tmp_path / "ref", stage="text_s1")

    def die(step):
        if step == 8:
            raise Kill

    with pytest.raises(Kill):
        train_attempt(fresh(), SPEC, CFG, tmp_path / "run", stage="text_s1", callback=die)
    meta = train_attempt(fresh(), SPEC, longer, tmp_path / "run", stage="text_s1")
    assert meta["resumed"] and meta["steps"] == 15
    resumed, _ = load_model(tmp_path / "run")
    for k, v in ref.state_dict().items():
        assert torch.equal(resumed.state_dict()[k], v), k


RAMP_SPEC = StageSpec(8, 8, 8, 2, 4, shuffle=True)
RAMP_CFG = TrainConfig(**{**CFG.__dict__, "ramp": True, "target_accuracy": 0.0, "max_steps": 30})  # 3 steps a length


def by_hand(model, out, cfg=RAMP_CFG, before_last: float | None = None):
    """The ramp written out: 2 objects, then 2..3, then the stage's 2..4, each a stage, the cap shared; the first
    two to the target `before_last` where given."""
    done = 0
    for n, name in ((2, "text_s4_n2"), (3, "text_s4_n3"), (4, "text_s4")):
        target = before_last if before_last is not None and n < 4 else cfg.target_accuracy
        meta = train_attempt(model, replace(RAMP_SPEC, max_objects=n),
                           replace(cfg, max_steps=cfg.max_steps - done, target_accuracy=target), out / name, stage=name)
        done += meta["steps"]
    return done


def test_a_ramp_trains_each_length_in_turn_as_its_own_stages_would(tmp_path):
    ref, ramped = fresh(), fresh()
    assert by_hand(ref, tmp_path / "hand") == 9
    meta = train_stage(ramped, RAMP_SPEC, RAMP_CFG, tmp_path / "run", stage="text_s4")
    for k, v in ref.state_dict().items():
        assert torch.equal(ramped.state_dict()[k], v), k
    assert [(r["max_objects"], r["steps"], r["stopped_because"]) for r in meta["ramp"]] == [
        (2, 3, "target_accuracy"), (3, 3, "target_accuracy")]
    assert (meta["ramp_steps"], meta["steps"], meta["train_config"]["max_steps"]) == (6, 3, 30)
    for n in (2, 3):
        sub = json.loads((tmp_path / "run" / "ramp" / f"n{n}" / "meta.json").read_text())
        assert (sub["stage"], sub["stage_spec"]["max_objects"]) == (f"text_s4_n{n}", n)
    assert json.loads((tmp_path / "run" / "meta.json").read_text()) == meta
    row = training_summary([tmp_path / "run" / "meta.json"]).iloc[0]  # training.csv's row
    assert row["ramp_steps"] == 6 and [x.split(":")[:2] for x in row["ramp"].split()] == [["2", "3"], ["3", "3"]]


def test_a_ramp_shares_its_stage_cap_and_a_cap_of_0_passes_the_weights_through(tmp_path):
    meta = train_stage(fresh(), RAMP_SPEC, replace(RAMP_CFG, max_steps=4), tmp_path / "a", stage="text_s4")
    assert [r["steps"] for r in meta["ramp"]] == [3, 1]  # the second length stops at what the first left
    assert (meta["ramp_steps"], meta["steps"]) == (4, 0)
    meta = train_stage(fresh(), RAMP_SPEC, replace(RAMP_CFG, max_steps=0), tmp_path / "b", stage="text_s4")
    assert meta["steps"] == 0 and "ramp" not in meta and not (tmp_path / "b" / "ramp").exists()


def test_a_ramp_killed_in_its_last_length_keeps_the_lengths_done_and_reaches_the_same_weights(tmp_path):
    ref = fresh()
    train_stage(ref, RAMP_SPEC, RAMP_CFG, tmp_path / "ref", stage="text_s4")
    calls = []

    def die(step):
        calls.append(step)
        if len(calls) == 8:  # step 2 of the third length
            raise Kill

    with pytest.raises(Kill):
        train_stage(fresh(), RAMP_SPEC, RAMP_CFG, tmp_path / "run", stage="text_s4", callback=die)
    calls.clear()
    rerun = fresh()
    train_stage(rerun, RAMP_SPEC, RAMP_CFG, tmp_path / "run", stage="text_s4", callback=calls.append)
    assert calls == [1, 2, 3]  # the two shorter lengths were not trained again
    for k, v in ref.state_dict().items():
        assert torch.equal(rerun.state_dict()[k], v), k
    other = replace(RAMP_CFG, lr=1e-3)  # other settings: the lengths done are discarded and trained again
    calls.clear()
    train_stage(fresh(), RAMP_SPEC, other, tmp_path / "run", stage="text_s4", callback=calls.append)
    assert len(calls) == 9
    assert json.loads((tmp_path / "run" / "ramp" / "n2" / "meta.json").read_text())["train_config"]["lr"] == 1e-3
    calls.clear()  # another start (an easier first task, which the first length trains on): discarded too
    start = (replace(RAMP_SPEC, max_objects=2), 2)
    train_stage(fresh(), RAMP_SPEC, other, tmp_path / "run", stage="text_s4", callback=calls.append, start=start)
    # the two lengths trained again; the stage's own length starts from the same weights with the same settings
    # (this start's task is the first length's own), so its finished attempt is kept (attempts.train_unit)
    assert len(calls) == 6
    assert json.loads((tmp_path / "run" / "ramp" / "n2" / "meta.json").read_text())["start"]["steps"] == 2


def test_same_seed_same_weights_and_metrics(tmp_path, reference):
    a_dir, a = reference
    b = fresh()
    train_attempt(b, SPEC, CFG, tmp_path / "b", stage="text_s1")
    for k, v in a.state_dict().items():
        assert torch.equal(b.state_dict()[k], v)
    a_curve, b_curve = (pd.read_parquet(d / "metrics.parquet") for d in (a_dir, tmp_path / "b"))
    pd.testing.assert_frame_equal(a_curve[["step", "val_accuracy", "train_loss"]],
                                  b_curve[["step", "val_accuracy", "train_loss"]])
    meta = json.loads((a_dir / "meta.json").read_text())
    assert meta["steps"] == 12 and meta["stage"] == "text_s1"
    c = fresh()
    train_attempt(c, SPEC, TrainConfig(**{**CFG.__dict__, "seed": 1}), tmp_path / "c", stage="text_s1")
    assert not all(torch.equal(c.state_dict()[k], v) for k, v in a.state_dict().items())


def test_stage_keeps_best_weights_and_stops_at_target(tmp_path):
    cfg = TrainConfig(**{**CFG.__dict__, "target_accuracy": 0.0})
    meta = train_attempt(fresh(), SPEC, cfg, tmp_path, stage="text_s1")
    assert meta["stopped_because"] == "target_accuracy" and meta["steps"] == cfg.eval_every


@pytest.mark.parametrize("wait", [0.0, 0.9])
def test_the_plateau_rule_waits_out_the_chance_phase_when_asked(tmp_path, wait):
    """lr 1e-30 (below the weights' rounding; the schema asks for lr > 0): validation never moves from its first
    value, near chance. The plateau rule stops the stage after `patience` validations, unless it waits for the best
    validation to leave chance by `wait`."""
    cfg = TrainConfig(**{**CFG.__dict__, "lr": 1e-30, "patience": 1, "plateau_above_chance": wait})
    meta = train_attempt(fresh(), SPEC, cfg, tmp_path, stage="text_s4")
    assert meta["best_val_accuracy"] < meta["val_chance"] + wait
    if wait:
        assert (meta["stopped_because"], meta["steps"]) == ("max_steps", cfg.max_steps)
    else:
        assert (meta["stopped_because"], meta["steps"]) == ("plateau", 2 * cfg.eval_every)


def test_a_certain_plateau_stops_at_once_with_the_weights_the_rule_would_keep(tmp_path, monkeypatch):
    """min_delta 0.9: once the best validation passes 0.1, no validation can gain 0.9 over it. The stage stops there,
    with the weights and best step of the same run made to wait out its patience (the check switched off); under
    `keep: last` (the last step's weights) and while the stall rule can still fire, it waits as before."""
    cfg = replace(CFG, min_delta=0.9, patience=2, max_steps=30, attempts=1)
    fast, slow = fresh(), fresh()
    meta = train_attempt(fast, SPEC, cfg, tmp_path / "fast", stage="text_s1")
    with monkeypatch.context() as m:
        m.setattr("vlbind.training.loop.gain_impossible", lambda best, min_delta: False)
        waited = train_attempt(slow, SPEC, cfg, tmp_path / "slow", stage="text_s1")
    assert meta["best_val_accuracy"] > 0.1 and meta["stopped_because"] == waited["stopped_because"] == "plateau"
    assert meta["steps"] == meta["best_step"] < waited["steps"] == meta["best_step"] + cfg.patience * cfg.eval_every
    assert (meta["best_step"], meta["best_val_accuracy"]) == (waited["best_step"], waited["best_val_accuracy"])
    for k, v in slow.state_dict().items():
        assert torch.equal(fast.state_dict()[k], v), k
    last = train_attempt(fresh(), SPEC, replace(cfg, keep="last"), tmp_path / "last", stage="text_s1")
    assert last["steps"] == waited["steps"]
    armed = replace(cfg, stall_steps=1000, pass_accuracy=1.0, attempts=2)  # below its bar: a retry may still come
    assert meta["best_val_accuracy"] < armed.pass_bar
    assert train_attempt(fresh(), SPEC, armed, tmp_path / "armed", stage="text_s1")["steps"] == waited["steps"]


def test_a_stage_given_its_parents_optimizer_continues_its_state(tmp_path):
    """Two stages with the parent's optimizer carried over train the weights that one run of both stages' steps
    with one optimizer trains (same batches: one task, one stream per stage name)."""
    cfg = TrainConfig(**{**CFG.__dict__, "warmup_steps": 0, "max_steps": 6, "keep": "last"})
    a = fresh()
    opt = make_optimizer(a, cfg)
    train_attempt(a, SPEC, cfg, tmp_path / "a1", stage="text_s1", optimizer=opt)
    train_attempt(a, SPEC, cfg, tmp_path / "a2", stage="text_s2", optimizer=opt)
    assert int(opt.state[next(iter(a.parameters()))]["step"]) == 12
    b = fresh()
    train_attempt(b, SPEC, cfg, tmp_path / "b1", stage="text_s1")
    train_attempt(b, SPEC, cfg, tmp_path / "b2", stage="text_s2")  # a fresh AdamW: other weights
    assert not all(torch.equal(b.state_dict()[k], v) for k, v in a.state_dict().items())


@pytest.mark.parametrize("keep", ["best", "last"])
def test_a_stage_keeps_the_weights_of_its_best_validation_or_of_its_last_step(tmp_path, keep):
    model, seen = fresh(), {}
    cfg = TrainConfig(**{**CFG.__dict__, "keep": keep, "binding_loss": 1.0})
    meta = train_attempt(model, SPEC, cfg, tmp_path, stage="text_bind",
                       callback=lambda step: seen.__setitem__(step, weights(model)))
    curve = pd.read_parquet(tmp_path / "metrics.parquet")
    best = int(curve.loc[curve["val_accuracy"].idxmax(), "step"])
    kept = cfg.max_steps if keep == "last" else best
    assert (meta["kept_step"], meta["best_step"]) == (kept, best)
    assert meta["kept_val_accuracy"] == curve.set_index("step")["val_accuracy"][kept]
    loaded, _ = load_model(tmp_path)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in seen[kept].items())


@pytest.mark.parametrize("keep", ["best", "last"])
@pytest.mark.parametrize("poison_at", [4, 1], ids=["after_a_finite_validation", "before_any"])
def test_too_many_skipped_steps_end_the_stage_with_finite_weights(tmp_path, keep, poison_at):
    """A NaN in the weights after step `poison_at` makes every later loss non-finite, so every later step is
    skipped: with one skip allowed, the stage stops at the next validation (two skipped) and keeps the best finite
    validation's weights (step 3's), or the starting weights where no validation was finite, whatever `keep` says;
    nothing it writes holds a NaN weight."""
    model, seen = fresh(), {0: weights(fresh())}
    cfg = TrainConfig(**{**CFG.__dict__, "keep": keep, "max_skipped_steps": 1})

    def poison(step):
        seen[step] = weights(model)
        if step == poison_at:
            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))

    meta = train_attempt(model, SPEC, cfg, tmp_path, stage="text_s1", callback=poison)
    kept = 3 if poison_at > 3 else 0
    assert (meta["stopped_because"], meta["steps"], meta["kept_step"]) == (NON_FINITE, 6 if kept else 3, kept)
    assert meta["skipped_steps"] == 2
    assert np.isnan(meta["best_val_accuracy"]) == (kept == 0)
    loaded, _ = load_model(tmp_path)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in seen[kept].items())


def nan_gradient_at(model, steps: set[int]) -> dict:
    """Make the gradient of the model's first weight NaN in the backward passes numbered `steps` (from 1): a kernel
    that returns NaN gradients (as cuDNN attention's backward did on an H100), the forward untouched."""
    seen = {"n": 0}

    def hook(grad):
        seen["n"] += 1
        return torch.full_like(grad, float("nan")) if seen["n"] in steps else grad

    next(model.parameters()).register_hook(hook)
    return seen


def optimizer_state(opt) -> list[dict]:
    return [{k: v.clone() for k, v in opt.state[p].items()} for group in opt.param_groups for p in group["params"]]


def test_a_step_with_a_non_finite_gradient_is_skipped(tmp_path):
    """A NaN gradient at step 5 of 5 leaves the weights and the AdamW state (moments and step count) exactly as a
    run of 4 steps has them, and nothing else the stage does changes: it goes on to its cap, counts the step in
    meta.json and metrics.parquet, and is not marked non-finite (one skip is within max_skipped_steps)."""
    cfg = replace(CFG, keep="last", max_steps=5)
    ref = fresh()
    ref_opt = make_optimizer(ref, cfg)
    train_attempt(ref, SPEC, replace(cfg, max_steps=4), tmp_path / "four", stage="text_s1", optimizer=ref_opt)
    model = fresh()
    opt = make_optimizer(model, cfg)
    nan_gradient_at(model, {5})
    meta = train_attempt(model, SPEC, cfg, tmp_path / "five", stage="text_s1", optimizer=opt)
    assert (meta["stopped_because"], meta["steps"], meta["skipped_steps"]) == ("max_steps", 5, 1)
    curve = pd.read_parquet(tmp_path / "five" / "metrics.parquet")
    assert curve["skipped_steps"].tolist() == [0, 1] and curve["finite"].all()
    assert all(torch.equal(v, ref.state_dict()[k]) for k, v in model.state_dict().items())
    for got, want in zip(optimizer_state(opt), optimizer_state(ref_opt), strict=True):
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in want)
    unpatched = fresh()  # the check can fail: step 5 does change the weights when its gradient is finite
    train_attempt(unpatched, SPEC, cfg, tmp_path / "five_unpatched", stage="text_s1")
    assert not all(torch.equal(v, ref.state_dict()[k]) for k, v in unpatched.state_dict().items())


def test_optimizer_step_skips_only_a_non_finite_step_and_refuses_an_unfused_optimizer():
    """optimizer_step against AdamW's own step: a finite step equals opt.step(); a NaN loss or an infinite gradient
    norm changes nothing; an optimizer that cannot skip on the device is refused by name."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4)) for _ in range(2)]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, twin_opt = (torch.optim.AdamW(ps, lr=0.1, fused=True) for ps in (params, twins))
    for p, q in zip(params, twins, strict=True):
        p.grad = q.grad = torch.randn(4)
    one, nan, inf = torch.tensor(1.0), torch.tensor(float("nan")), torch.tensor(float("inf"))
    assert optimizer_step(opt, one, one).item() == 0.0
    twin_opt.step()
    assert all(torch.equal(p, q) for p, q in zip(params, twins, strict=True))
    before = [p.detach().clone() for p in params], optimizer_state(opt)
    assert optimizer_step(opt, nan, one).item() == 1.0 and optimizer_step(opt, one, inf).item() == 1.0
    assert all(torch.equal(p, q) for p, q in zip(params, before[0], strict=True))
    for got, want in zip(optimizer_state(opt), before[1], strict=True):
        assert all(torch.equal(got[k], want[k]) for k in want)
    with pytest.raises(ValueError, match="not fused"):
        optimizer_step(torch.optim.AdamW(params, lr=0.1, foreach=True), one, one)


def test_warmup_then_constant():
    cfg = TrainConfig(lr=1e-3, warmup_steps=2000)
    assert lr_at(1, cfg) == pytest.approx(1e-3 / 2000)
    assert lr_at(1000, cfg) == pytest.approx(5e-4)
    assert lr_at(2000, cfg) == lr_at(50_000, cfg) == pytest.approx(1e-3)


def test_answer_logits_equal_the_full_forward_at_answer():
    """Training unembeds only the [ANSWER] rows; they must be exactly what the full forward gives there."""
    from vlbind.model.inference import answer_logits

    m = fresh()
    b = generate(SPEC, 4, np.random.default_rng(0))
    full = m(torch.from_numpy(b.tokens), torch.from_numpy(b.positions))
    torch.testing.assert_close(answer_logits(m, b, "cpu"), full[torch.arange(4), torch.from_numpy(b.answer_pos)])


def naive_accuracy(model, cfg: EvalConfig, n: int) -> float:
    """One prompt at a time, unpadded, from the same prompt stream as evaluate() (every prompt of a length drawn at
    once)."""
    rng = np.random.default_rng([cfg.seed, n])
    b = generate(EVAL_SPEC, cfg.prompts_per_length, rng, n_objects=n, kind=RETRIEVAL, query_by=BY_COLOR, noise=False)
    hits = 0
    for i in range(len(b)):
        L = b.answer_pos[i] + 1
        logits = model(torch.from_numpy(b.tokens[i : i + 1, :L]))[0, -1]
        hits += int(logits.argmax()) == b.target[i]
    return hits / cfg.prompts_per_length


def test_evaluation_matches_naive_loop_and_never_mutates(tmp_path):
    m = fresh()
    train_attempt(m, StageSpec(216, 216, 32, 2, 4), CFG, tmp_path, stage="text_s5")
    m.train()
    before = weights(m)
    cfg = EvalConfig(min_objects=2, max_objects=11, train_max_objects=8, prompts_per_length=24, batch_size=10)
    table = evaluate(m, cfg)
    assert m.training
    for k, v in before.items():
        assert torch.equal(m.state_dict()[k], v)
    assert list(table["n_objects"]) == list(range(2, 12))
    assert table["in_distribution"].tolist() == [n <= 8 for n in range(2, 12)]
    m.eval()
    with torch.no_grad():
        for n in (2, 9, 11):
            assert table.set_index("n_objects").loc[n, "accuracy"] == pytest.approx(naive_accuracy(m, cfg, n))
    assert ood_average(table) == pytest.approx(table[table.n_objects > 8].accuracy.mean())


def test_evaluation_scores_the_same_prompts_for_any_batch_size(tmp_path):
    """evaluate.batch_size is memory only: batches of 10, 20, 7 and one of all 24 give the same table, cell for cell
    (the same prompts, the same answers), and so do the analyses' prompts."""
    from vlbind.interp.prompts import analysis_prompts

    m = fresh()
    train_attempt(m, StageSpec(216, 216, 32, 2, 4), CFG, tmp_path, stage="text_s5")
    cfg = EvalConfig(min_objects=2, max_objects=10, train_max_objects=8, prompts_per_length=24, batch_size=10,
                     orders=["shuffled", "fixed"])
    table = evaluate(m, cfg)
    for size in (20, 7, 24):
        pd.testing.assert_frame_equal(evaluate(m, replace(cfg, batch_size=size)), table)

    def rows(batches):  # each prompt's tokens up to its [ANSWER], in order
        return [b.tokens[i, : b.answer_pos[i] + 1].tolist() for b in batches for i in range(len(b))]

    assert rows(analysis_prompts(30, 5, 8, order="shuffled")) == rows(analysis_prompts(30, 5, 256, order="shuffled"))


def test_in_batches_splits_a_batch_into_its_prompts_cut_to_their_longest(tmp_path):
    """Against the batch itself: the pieces hold its prompts in order, each array cut where the piece's longest
    prompt ends, nothing but padding cut."""
    from vlbind.data.batching import in_batches

    b = generate(StageSpec(216, 216, 32, 2, 8, shuffle=True), 23, np.random.default_rng(3))
    parts = in_batches(b, 5)
    assert [len(p) for p in parts] == [5, 5, 5, 5, 3]
    for k, part in enumerate(parts):
        whole = b.subset(slice(5 * k, 5 * k + len(part)))
        width = part.tokens.shape[1]
        assert width == (whole.answer_pos.max() + 1) and (whole.roles[:, width:] == Role.PAD).all()
        token_arrays = {"tokens", "positions", "roles", "slots", "image_ids", "patches"}  # (B, T): cut
        for name, value in vars(part).items():
            want = getattr(whole, name)
            assert value is want is None or np.array_equal(value, want[:, :width] if name in token_arrays else want)


def test_evaluation_logs_each_length_as_its_table_row_with_an_eta_that_ends_at_zero(caplog):
    cfg = EvalConfig(min_objects=2, max_objects=5, train_max_objects=4, prompts_per_length=6, batch_size=4,
                     orders=["shuffled", "fixed"])
    with caplog.at_level(logging.INFO, logger="vlbind.evaluation.evaluate"):
        table = evaluate(fresh(), cfg)
    lines = [r.getMessage() for r in caplog.records if r.name == "vlbind.evaluation.evaluate"]
    assert len(lines) == len(table) == 8
    for line, row in zip(lines, table.itertuples()):
        assert line.startswith(f"evaluate {row.order}, {row.n_objects} objects: accuracy {row.accuracy:.4f} | ")
    assert lines[-1].endswith("ETA 0 s")


def test_two_order_evaluation_is_recomputed_prompt_by_prompt_from_the_text(tmp_path):
    m = fresh()
    train_attempt(m, StageSpec(216, 216, 32, 2, 4, shuffle=False), CFG, tmp_path, stage="text_s5")
    cfg = EvalConfig(min_objects=2, max_objects=9, train_max_objects=8, prompts_per_length=12, batch_size=5,
                     orders=["fixed", "shuffled"])
    table = evaluate(m, cfg)
    assert table["order"].tolist() == ["fixed"] * 8 + ["shuffled"] * 8
    m.eval()
    for order in ("fixed", "shuffled"):
        for n in (3, 9):
            rng, hits, in_order = np.random.default_rng([cfg.seed, n]), 0, []
            spec = StageSpec(216, 216, 32, 2, 32, shuffle=order == "shuffled")
            for b in [generate(spec, 12, rng, n_objects=n, kind=RETRIEVAL, query_by=BY_COLOR, noise=False)]:
                for i in range(len(b)):
                    text = prompt_text(b, i)
                    answer = solve(text)
                    in_order.append(keys_in_context_order(text))
                    with torch.no_grad():
                        logits = m(torch.from_numpy(b.tokens[i : i + 1, : b.answer_pos[i] + 1]))[0, -1]
                    hits += VOCAB.tokens[int(logits.argmax())] == answer
            assert all(in_order) if order == "fixed" else not all(in_order)
            row = table[(table.order == order) & (table.n_objects == n)].iloc[0]
            assert row["accuracy"] == pytest.approx(hits / 12) and row["n_prompts"] == 12
    with pytest.raises(ValueError, match="orders"):
        EvalConfig(orders=["random"])
    with pytest.raises(ValueError, match="orders"):
        EvalConfig(orders=[])


def test_ood_table_and_fig3_keep_the_orders_apart(tmp_path):
    from vlbind.evaluation.tables import ood_table
    from vlbind.figures import fig3, fig8

    df = pd.concat([eval_table("text_only", "seed0", 0.99, 0.1).assign(order="fixed"),
                    eval_table("text_only", "seed0", 0.25, 0.05).assign(order="shuffled"),
                    eval_table("image_text", "seed0-x", 0.9, 0.6).assign(order="fixed"),
                    eval_table("image_text", "seed0-x", 0.99, 0.4).assign(order="shuffled")])
    t = ood_table(df)
    assert t.index.names == ["order", "variant"] and list(t.index.get_level_values(0)) == ["fixed"] * 2 + [
        "shuffled"] * 2
    assert t.loc[("fixed", "text_only"), "ood_mean"] == pytest.approx(0.1)
    assert t.loc[("shuffled", "image_text"), "ood_mean"] == pytest.approx(0.4)
    fig3(df, tmp_path / "fig3.pdf")
    fig8(df, tmp_path / "fig8.pdf")
    assert (tmp_path / "fig3.pdf").read_bytes().startswith(b"%PDF")


def test_run_summary_counts_runs_left_out():
    from vlbind.evaluation.tables import ood_table, run_summary

    df = pd.concat([eval_table("text_only", "seed0", 0.99, 0.2, min_in_distribution=0.95),
                    eval_table("text_only", "seed1", 0.99, 0.4, min_in_distribution=0.95),
                    eval_table("text_only", "seed2", 0.5, 0.1, min_in_distribution=0.95),
                    eval_table("noise_text", "seed0", 0.99, 0.1, diverged=True)]).assign(order="fixed")
    lines = run_summary(ood_table(df).reset_index()).splitlines()[1:]
    assert lines == ["  fixed     text_only          2 of 3 runs converged, OOD 30.0 ± 10.0 %",
                     "  fixed     noise_text         0 of 1 runs converged (1 diverged), no OOD mean"]


def snakemake_log(folder, start: str, body: str, mtime: str | None = None) -> None:
    """A Snakemake log in `folder` (a working directory's .snakemake/log) named for its start
    (`2026-12-07T042318.713286`), written as Snakemake writes one; `mtime`: its last write."""
    import datetime
    import os

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{start}.snakemake.log"
    path.write_text(body)
    if mtime:
        t = datetime.datetime.fromisoformat(mtime).timestamp()
        os.utime(path, (t, t))


def test_scheduler_runs_and_stretches_read_snakemake_logs(tmp_path):
    from vlbind.evaluation.tables import scheduler_runs, stretches

    logs = tmp_path / ".snakemake/log"
    stats = "Building DAG of jobs...\nJob stats:\njob count\n"
    done = "Finished jobid: 3 (Rule: train_text)\n1 of 2 steps (50%) done\nFinished jobid: 0 (Rule: all)\n"
    job = ("localrule train_text:\n    output: results/models/seed0/text_s5/model.safetensors, "
           "results/models/seed0/text_s5/meta.json\n    log: results/logs/train/seed0/text_s5.log\n")
    snakemake_log(logs, "2026-12-07T020000.000000", "Unlocked working directory.\n")  # an --unlock: no run
    snakemake_log(logs, "2026-12-07T020001.000000", stats + "This was a dry-run (flag -n).\n")
    # two seeds side by side, stopped by a TERM: one stretch
    snakemake_log(logs, "2026-12-07T021000.500000", stats + done + "Will exit after finishing currently running "
                  "jobs (scheduler).\nElapsed time: 1:00:00.000000\n")
    snakemake_log(logs, "2026-12-07T021500.500000", stats + "Error in rule train_text:\nExiting because a job "
                  "execution failed. Look above for error messages\nElapsed time: 1:10:30.000000\n")
    # killed outright, its log silent after 04:30 while its job logged on to 05:12 (its train.log, which the next
    # run of the job, from 06:00, appends to); then one killed with a job that logged nothing after its log's write
    snakemake_log(logs, "2026-12-07T040000.000000", stats + job, mtime="2026-12-07T04:30:00")
    history = tmp_path / "results/models/seed0/text_s5/train.log"
    history.parent.mkdir(parents=True)
    history.write_text("2026-12-07 04:01:00,100 INFO vlbind.train: text_s5 step 250\n"
                       "2026-12-07 05:12:00,000 INFO vlbind.train: text_s5 step 9000\n"
                       "2026-12-07 06:01:00,000 INFO vlbind.train: text_s5 step 9250\n")
    snakemake_log(logs, "2026-12-07T053000.000000", stats, mtime="2026-12-07T05:45:00")
    snakemake_log(logs, "2026-12-07T060000.000000", stats + job + done + "2 of 2 steps (100%) done\n"
                  "Elapsed time: 1 day, 0:00:30.000000\n")  # over a day, to the end
    runs = scheduler_runs(logs)
    assert list(runs.outcome) == ["stopped", "failed", "no exit", "no exit", "done"]
    assert list(runs.ended_from) == ["exit", "exit", "job log", "last write", "exit"]
    assert list(runs.jobs) == [2, 0, 0, 0, 2]
    assert list(runs.minutes) == pytest.approx([60, 70.5, 72, 15, 24 * 60 + 0.5])
    s = stretches(runs)
    assert list(s.schedulers) == [2, 1, 1, 1] and list(s.jobs) == [2, 0, 0, 2]
    assert list(s.ends_unlogged) == [0, 1, 1, 0]
    assert list(s.minutes) == pytest.approx([5 + 70.5, 72, 15, 24 * 60 + 0.5])  # from 02:10:00.5 to 03:25:30.5
    assert str(s.ended[0]) == "2026-12-07 03:25:30.500000"


def test_max_steps_zero_passes_the_starting_weights_through_and_scores_them(tmp_path):
    m = fresh(3)
    before = weights(m)
    cfg = TrainConfig(**{**CFG.__dict__, "max_steps": 0})
    meta = train_attempt(m, SPEC, cfg, tmp_path, stage="text_s4", parent="p")
    loaded, _ = load_model(tmp_path)
    for k, v in before.items():
        assert torch.equal(loaded.state_dict()[k], v)
    from vlbind.model.inference import accuracy
    from vlbind.training.loop import validation_set

    assert meta["steps"] == 0 and meta["best_step"] == 0
    assert meta["best_val_accuracy"] == accuracy(m, validation_set(SPEC, cfg), "cpu")
    curve = pd.read_parquet(tmp_path / "metrics.parquet")
    assert curve["step"].tolist() == [0] and curve["finite"].all()
    with pytest.raises(ValueError, match="max_steps"):
        TrainConfig(max_steps=-1)


def test_bad_train_config_names_the_key():
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="fp8")
    with pytest.raises(ValueError, match="queries"):
        TrainConfig(queries="some")
    with pytest.raises(ValueError, match="lrr"):
        TrainConfig.from_dict({"lrr": 1})


def eval_table(variant, run, accuracy_in, accuracy_out, diverged=False, min_in_distribution=None):
    from vlbind.evaluation.outcomes import convergence

    t = pd.DataFrame({"n_objects": [2, 8, 9, 12], "accuracy": [accuracy_in] * 2 + [accuracy_out] * 2,
                      "in_distribution": [True, True, False, False]})
    why = convergence(t, min_in_distribution)
    return t.assign(variant=variant, run=run, diverged=diverged, converged=why is None, convergence=why or "")


def test_convergence_rule_marks_runs_below_the_bar_only_when_set():
    from vlbind.evaluation.outcomes import convergence

    t = eval_table("text_only", "seed0", 0.9, 0.3)
    assert convergence(t, None) is None and convergence(t, 0.9) is None
    assert convergence(t, 0.95) == "mean in-distribution accuracy 0.900 < 0.95"


def test_a_runs_verdicts_come_from_its_lineage_and_its_first_order():
    """with_verdicts, evaluate's columns: a stage whose best validation stayed at chance marks the run diverged
    (a ramped stage counts its lengths' steps as trained even when its own length took none), as does a length of
    its ramp that ended on non-finite steps; convergence is read on the first order only."""
    from vlbind.evaluation.outcomes import DivergenceRule, with_verdicts

    rule = DivergenceRule(min_in_distribution=0.95)
    curve = pd.DataFrame({"step": [250], "val_accuracy": [0.27], "finite": [True]})
    table = pd.concat([eval_table("text_only", "seed0", 0.99, 0.3).assign(order="fixed"),
                       eval_table("text_only", "seed0", 0.5, 0.3).assign(order="shuffled")])
    meta = {"steps": 0, "ramp_steps": 4000, "best_val_accuracy": 0.27, "val_chance": 0.25, "stopped_because": "x"}
    out = with_verdicts(table, {"text_s4": curve}, {"text_s4": meta}, rule, "fixed")
    assert out["diverged"].all() and "stalled at chance" in out["divergence"].iloc[0] and "4000 steps" in \
        out["divergence"].iloc[0]
    assert out["converged"].all()  # fixed: 0.99 in distribution; the shuffled 0.5 is not the first order
    out = with_verdicts(table, {"text_s4": curve}, {"text_s4": {**meta, "ramp_steps": 0}}, rule, "shuffled")
    assert not out["diverged"].any() and not out["converged"].any()  # untrained: passed through, not stalled
    lengths = [{"max_objects": 2, "stopped_because": "target_accuracy"},
               {"max_objects": 3, "stopped_because": NON_FINITE}]  # then its own length, finite
    out = with_verdicts(table, {"text_s4": curve}, {"text_s4": {**meta, "best_val_accuracy": 0.9, "ramp": lengths}},
                        rule, "fixed")
    assert out["divergence"].iloc[0] == "text_s4: non-finite steps in its ramp, at 3 objects"


def test_runs_below_the_bar_or_diverged_are_left_out_of_means_and_counted(tmp_path):
    from vlbind.evaluation.tables import ood_summary
    from vlbind.figures import fig3, fig8

    df = pd.concat([eval_table("text_only", "seed0", 0.99, 0.4, min_in_distribution=0.95),
                    eval_table("text_only", "seed1", 0.97, 0.2, min_in_distribution=0.95),
                    eval_table("text_only", "seed2", 0.50, 0.9, min_in_distribution=0.95),   # below the bar
                    eval_table("text_only", "seed3", 0.99, 0.9, diverged=True),
                    eval_table("noise_text", "seed0", 0.30, 0.1, min_in_distribution=0.95)])  # none used
    s = ood_summary(df)
    assert s.loc["text_only", ["runs", "diverged_runs", "unconverged_runs"]].tolist() == [2, 1, 1]
    assert s.loc["text_only", "ood_mean"] == pytest.approx(0.3)  # seeds 0 and 1 only
    assert s.loc["text_only", "ood_se"] == pytest.approx(np.std([0.4, 0.2], ddof=1) / np.sqrt(2))
    assert s.loc["noise_text", ["runs", "unconverged_runs"]].tolist() == [0, 1] and np.isnan(s.loc["noise_text",
                                                                                                    "ood_mean"])
    labels = set(fig3(df, tmp_path / "fig3.pdf").attrs["legends"][0])
    assert "text_only: OOD 30.0% ± 10.0 (2 of 4 runs)" in labels  # counts, not floats
    assert "noise_text: no OOD mean (0 of 1 runs)" in labels
    fig8(df, tmp_path / "fig8.pdf")
    assert (tmp_path / "fig3.pdf").read_bytes().startswith(b"%PDF")


def test_a_stage_start_draws_its_first_batches_from_the_start_task(tmp_path, monkeypatch):
    import vlbind.training.loop as train

    drawn, real = [], train.generate
    monkeypatch.setattr(train, "generate", lambda spec, *a, **k: drawn.append(spec) or real(spec, *a, **k))
    easy = StageSpec(8, 8, 8, 2, 2, shuffle=True)
    meta = train_attempt(fresh(), SPEC, CFG, tmp_path / "run", stage="s", start=(easy, 5))
    training = [s for s in drawn if s in (easy, SPEC)][-CFG.max_steps:]  # validation sets are drawn first
    assert training == [easy] * 5 + [SPEC] * (CFG.max_steps - 5)
    assert meta["start"] == {"stage_spec": easy.to_dict(), "steps": 5}


def test_stage_params_carry_the_start_task_merged_over_the_stage_task():
    from pathlib import Path

    from vlbind import config as vlconfig
    from vlbind import params as vlparams

    root = Path(__file__).resolve().parents[1]
    config = vlconfig.load([root / "config/config.yaml", root / "config/mini.yaml"])
    params = vlparams.stage_params(config, "image", "render_cnn")
    assert params["start"]["task"] == {**params["task"], "max_objects": 2} and params["start"]["steps"] == 3000
    assert "start" not in vlparams.stage_params(config, "mixed", "render_cnn")


def test_a_job_logs_its_device_and_precision_first(caplog):
    import logging

    from vlbind.core.device import job_device

    with caplog.at_level(logging.INFO, logger="vlbind"):
        assert job_device("cpu", 1) == ("cpu", "fp32")
        assert job_device("cpu", 1, {"cpu": "fp32", "cuda": "bf16"}) == ("cpu", "fp32")
    # without a precision section (the Qwen jobs) no autocast: the weights' own dtype, which jobs.for_job logs
    assert caplog.messages == ["device cpu, 1 thread, no autocast: the weights' dtype", "device cpu, 1 thread, fp32"]


def test_jobs_on_a_machine_with_several_gpus_spread_over_them(tmp_path, monkeypatch):
    """claim_gpu: each job the least-used GPU while its lock is held; a finished (or killed) job's GPU is free
    again. And job_device gives a plain `cuda` job the GPU it claims, not cuda:0 for all."""
    import torch

    from vlbind.core import device

    held = [device.claim_gpu(2, tmp_path) for _ in range(5)]
    assert [g for g, _ in held] == [0, 1, 0, 1, 0]
    held[1][1].close()  # the job on GPU 1 ends
    again = device.claim_gpu(2, tmp_path)
    assert again[0] == 1
    for _, lock in held + [again]:
        lock.close()
    assert device.claim_gpu(2, tmp_path)[0] == 0

    monkeypatch.setenv("VLBIND_GPU_LOCKS", str(tmp_path / "job"))
    (tmp_path / "job").mkdir()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: f"GPU {d}")
    monkeypatch.setattr(device, "_CLAIMED", [])
    assert [device.job_device("cuda", 1)[0] for _ in range(4)] == ["cuda:0", "cuda:1", "cuda:2", "cuda:0"]
    for lock in device._CLAIMED:
        lock.close()


def test_a_train_section_gives_a_job_its_devices_sub_batch_tokens():
    section = {"batch_size": 256, "sub_batch_tokens": {"cpu": 32, "cuda": None}, "precision": {"cpu": "auto"}}
    assert TrainConfig.from_section(section, 0, "cpu", "fp32").sub_batch_tokens == 32
    on_gpu = TrainConfig.from_section(section, 0, "cuda:1", "bf16")
    assert (on_gpu.sub_batch_tokens, on_gpu.precision) == (None, "bf16")
    assert TrainConfig.from_section({"batch_size": 8}, 0, "cpu", "fp32").sub_batch_tokens is None
    with pytest.raises(ValueError, match="sub_batch_tokens=0"):
        TrainConfig.from_section({"sub_batch_tokens": {"cpu": 0}}, 0, "cpu", "fp32")

"""What a stage's rules read (train.Validation, StageSpec.judged): validation per kind of prompt where a stage mixes
kinds, the stall rule's at-chance clause on the judged part, the steps a stalled attempt gives back to its retry
(vlbind.training.attempts), and a window that cannot fire before its cap as a config error."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from test_attempts import RETRIES, naive_stall_end, stall_settings
from test_vision import make_bank, tiny

from vlbind import config as vlconfig
from vlbind import params as vlparams
from vlbind.data.spec import StageSpec
from vlbind.data.tasks import GROUNDING, IMAGE, RETRIEVAL, TEXT
from vlbind.evaluation.tables import training_summary
from vlbind.model.checkpoint import load_model
from vlbind.model.inference import correct
from vlbind.training.attempts import stall_end, train_unit
from vlbind.training.config import TrainConfig
from vlbind.training.loop import PART, STALLED, Validation, _Progress, train_attempt, validation_set
from vlbind.training.resume import RESUME_FILE

ROOT = Path(__file__).resolve().parents[1]
MIXED = StageSpec(n_colors=8, n_shapes=13, n_items=8, min_objects=2, max_objects=4, grounding_fraction=0.5,
                  image_fraction=0.5)
CFG = TrainConfig(warmup_steps=2, batch_size=8, eval_every=2, val_size=96, max_steps=6, target_accuracy=None)


def test_a_stage_s_judged_part_follows_its_mix_of_prompts():
    text = StageSpec(8, 8, 8, 2, 3)
    assert text.judged is None and replace(text, grounding_fraction=1.0).judged is None  # one kind: one accuracy
    assert replace(text, image_fraction=1.0).judged is None  # image retrieval alone
    assert replace(text, grounding_fraction=0.5).judged == "retrieval"
    assert replace(text, image_fraction=0.2).judged == "retrieval"  # text and image retrieval
    assert replace(text, grounding_fraction=1.0, image_fraction=0.2).judged == "all"  # no retrieval prompt


def test_per_kind_accuracies_on_a_mixed_validation_set_equal_their_hand_counts(tmp_path):
    bank = make_bank(tmp_path, "per_object", dim=6)
    batches = validation_set(MIXED, CFG, chunk=32, bank=bank)
    val = Validation.of(batches, MIXED.for_validation().judged)
    assert val.judged == "retrieval"
    model = tiny().attach_projector(6)
    hits = correct(model, batches, "cpu", bank=bank)
    judged, parts = val.read(hits)
    # by hand: each prompt's kind and context from its batch, its hit from the model's argmax one prompt at a time
    rows = [(int(b.kind[i]), int(b.modality[i]), int(b.n_objects[i])) for b in batches for i in range(len(b))]
    kinds = {"retrieval": RETRIEVAL, "grounding": GROUNDING}
    modalities = {"text": TEXT, "image": IMAGE}

    def count(keep):
        chosen = [h for h, r in zip(hits.tolist(), rows) if keep(r)]
        return sum(chosen) / len(chosen), len(chosen)

    expected = {"all": count(lambda r: True)}
    expected |= {k: count(lambda r, v=v: r[0] == v) for k, v in kinds.items()}
    expected |= {f"{m}_{k}": count(lambda r, mv=mv, kv=kv: r[1] == mv and r[0] == kv)
                 for m, mv in modalities.items() for k, kv in kinds.items()}
    assert set(parts) == set(expected)
    for part, (acc, n) in expected.items():
        assert parts[part] == pytest.approx(acc) and val.describe()[part]["prompts"] == n, part
        chance = np.mean([1 / r[2] for r in rows if part == "all" or _in(part, r, kinds, modalities)])
        assert val.chance(part) == pytest.approx(chance), part
    assert judged == parts["retrieval"] and sum(n for _, n in (expected[k] for k in kinds)) == len(rows)


def _in(part, row, kinds, modalities):
    *modality, kind = part.split("_")
    return row[0] == kinds[kind] and (not modality or row[1] == modalities[modality[0]])


def test_a_text_stage_mixing_grounding_and_retrieval_has_no_context_cells():
    spec = StageSpec(8, 8, 8, 2, 3, grounding_fraction=0.5)
    batches = validation_set(spec, CFG)
    val = Validation.of(batches, spec.for_validation().judged)
    assert set(val.parts) == {"all", "retrieval", "grounding"}
    kind = np.concatenate([b.kind for b in batches])
    assert val.describe()["grounding"]["prompts"] == int((kind == GROUNDING).sum()) > 0


def test_a_single_kind_stage_keeps_one_accuracy_and_its_files_as_before(tmp_path):
    spec = StageSpec(8, 8, 8, 2, 3)
    meta = train_attempt(tiny(), spec, replace(CFG, val_size=16), tmp_path, stage="text_s1")
    curve = pd.read_parquet(tmp_path / "metrics.parquet")
    assert "val_judged" not in meta and "val_parts" not in meta
    assert not [c for c in curve.columns if c.startswith(("val_accuracy_", "val_chance_", "val_prompts_"))]


def test_a_mixed_stage_records_each_part_in_its_curve_meta_and_training_table(tmp_path):
    bank = make_bank(tmp_path, "per_object", dim=6)
    meta = train_attempt(tiny().attach_projector(6), MIXED, CFG, tmp_path / "run", stage="mixed", bank=bank)
    curve = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    assert meta["val_judged"] == "retrieval"
    assert (curve["val_accuracy"] == curve[PART + "retrieval"]).all()  # the rules' column is the judged part's
    assert meta["val_chance"] == meta["val_parts"]["retrieval"]["chance"]
    kept = curve.set_index("step").loc[meta["kept_step"]]
    for part, d in meta["val_parts"].items():
        assert d["kept_accuracy"] == kept[PART + part] and (curve[f"val_prompts_{part}"] == d["prompts"]).all()
    assert sum(meta["val_parts"][k]["prompts"] for k in ("retrieval", "grounding")) == CFG.val_size
    row = training_summary([tmp_path / "run" / "meta.json"]).iloc[0]
    assert row["val_judged"] == "retrieval" and row["val_image_retrieval_prompts"] > 0
    assert row["val_retrieval_accuracy"] == row["kept_val_accuracy"]


def test_a_killed_mixed_stage_resumes_bit_identically_with_its_parts(tmp_path):
    bank = make_bank(tmp_path, "per_object", dim=6)
    cfg = replace(CFG, max_steps=8, checkpoint_every=2)
    ref = train_attempt(tiny().attach_projector(6), MIXED, cfg, tmp_path / "ref", stage="mixed", bank=bank)

    class Kill(Exception):
        pass

    def die(step):
        if step == 5:
            raise Kill

    with pytest.raises(Kill):
        train_attempt(tiny().attach_projector(6), MIXED, cfg, tmp_path / "run", stage="mixed", bank=bank, callback=die)
    assert (tmp_path / "run" / RESUME_FILE).exists()
    meta = train_attempt(tiny().attach_projector(6), MIXED, cfg, tmp_path / "run", stage="mixed", bank=bank)
    assert meta["resumed"] and meta["val_parts"] == ref["val_parts"]
    a, b = load_model(tmp_path / "ref")[0], load_model(tmp_path / "run")[0]
    assert all(torch.equal(v, b.state_dict()[k]) for k, v in a.state_dict().items())
    timing = ["steps_per_s"]
    pd.testing.assert_frame_equal(*(pd.read_parquet(tmp_path / d / "metrics.parquet").drop(columns=timing)
                                    for d in ("ref", "run")))


def validations(accs, chance, cfg, start_steps=0, every=250, progress=None):
    """Feed _Progress.validate the validations `accs` (one every `every` steps); the step it stalls at, or None."""
    progress, zero = progress or _Progress(best_state={}, start_steps=start_steps), torch.zeros(1)
    for i, acc in enumerate(accs, 1):
        progress.step = every * i
        if progress.validate(torch.nn.Linear(1, 1), acc, zero, zero, zero, 1.0, cfg, chance) == STALLED:
            return progress.step
    return None


# A retrieval accuracy within 0.05 of its chance (0.26) that gains 0.012 every other validation: the no-gain clause
# (a gain of 0.01 in 1,000 steps) never fires, the at-chance clause does
CREEP = [0.250, 0.262, 0.262, 0.274, 0.274, 0.286, 0.286, 0.298, 0.298, 0.298, 0.298]
RULE = TrainConfig(eval_every=250, target_accuracy=0.95, patience=10**6, attempts=3, stall_steps=1000, stall_gain=0.01,
                   stall_margin=0.05)


def test_an_attempt_within_the_margin_of_chance_for_the_window_stalls_and_one_above_it_does_not():
    assert validations(CREEP[:9], 0.26, replace(RULE, stall_margin=None)) is None  # the no-gain clause alone
    assert validations(CREEP, 0.26, RULE) == 1250  # within 0.05 of chance from the first validation (250) on
    assert validations(CREEP[:9], 0.19, RULE) is None  # every validation above 0.24: never at chance
    # a validation above the margin opens the window again there
    progress = _Progress(best_state={})
    assert validations([0.26, 0.26, 0.26, 0.40, 0.26], 0.26, RULE, progress=progress) is None
    assert progress.chance_step == 1000
    # the start phase is not judged: the window opens at its last validation (1,000)
    assert validations(CREEP, 0.26, RULE, start_steps=1000) == 2000 == \
        stall_end(250 * np.arange(1, len(CREEP) + 1), np.array(CREEP), 0.95, 1000, 0.01, 0.26, 0.05, 1000)
    assert validations(CREEP, 0.26, replace(RULE, attempts=1)) is None  # the last attempt runs to the stop rule


@pytest.mark.parametrize("accs", [CREEP, [0.3, 0.9, 0.1, 0.26, 0.27, 0.5, 0.26, 0.26, 0.26, 0.26, 0.26, 0.3],
                                  list(np.random.default_rng(0).uniform(0.2, 0.4, 40))])
@pytest.mark.parametrize("start", [0, 1000])
def test_the_training_loop_s_at_chance_clause_is_the_replayed_one(accs, start):
    steps = 250 * np.arange(1, len(accs) + 1)
    assert validations(accs, 0.26, RULE, start) == stall_end(steps, np.array(accs), 0.95, 1000, 0.01, 0.26, 0.05,
                                                             start)


def unit_chance(unit: str) -> float:
    """A recorded unit's validation chance, the mean of 1 / objects over its range (config.yaml's tasks): text_s1 and
    text_s2 on 2 objects, a ramp length text_s4_n{K} on 2..K, the others on 2..8."""
    top = 2 if unit in ("text_s1", "text_s2") else int(unit.removeprefix("text_s4_n")) if "_n" in unit else 8
    return float(np.mean(1 / np.arange(2, top + 1)))


def test_on_the_committed_single_kind_curves_the_at_chance_clause_decides_as_before():
    """docs/results/retries/curves, replayed with the at-chance clause at divergence.stall_margin (0.05): mini's 85
    recorded attempts end where the rule without it ended them; of the 11 paper-size curves, the two that the rule
    already stalled (a plateau at chance, a cap at 0.300) stall sooner and no other ends, the slow escape included
    (at chance to ~4,500 steps, passed at 9,000; a margin of 0.1 would end it at 5,500)."""
    margin = vlconfig.load([ROOT / "config/config.yaml"])["divergence"]["stall_margin"]
    df = pd.read_csv(RETRIES / "mini-5ad55f4.csv")
    window, gain = stall_settings(["config/config.yaml", "config/mini.yaml"], "text_s3")
    for (_, unit), g in df.groupby(["log", "unit"]):
        bar = 0.95 if unit.startswith(("text_s3", "text_s4")) else 0.98
        steps, acc = g["step"].to_numpy(), g["val_accuracy"].to_numpy()
        assert stall_end(steps, acc, bar, window, gain, unit_chance(unit), margin) == \
            naive_stall_end(steps, acc, bar, window, gain), unit
    paper, ends = pd.read_csv(RETRIES / "paper-size.csv"), {}
    for curve, g in paper.groupby("curve"):
        stage = g["stage"].iloc[0]
        window, gain = stall_settings(["config/config.yaml"], stage)
        steps, acc = g["step"].to_numpy(), g["val_accuracy"].to_numpy()
        ends[curve] = (stall_end(steps, acc, 0.95, window, gain, unit_chance(stage), margin),
                       naive_stall_end(steps, acc, 0.95, window, gain))
        if curve == 2:
            assert stall_end(steps, acc, 0.95, window, gain, unit_chance(stage), 0.1) == 5500
    assert {c: e for c, e in ends.items() if e[0] != e[1]} == {1: (5500, 8000), 9: (5500, 6500)}


SPEC = StageSpec(8, 8, 8, 2, 3, shuffle=True)
UNIT = TrainConfig(queries="one", lr=3e-3, warmup_steps=4, batch_size=8, eval_every=3, val_size=16, max_steps=12,
                   checkpoint_every=3, target_accuracy=1.0, patience=100, attempts=3, stall_steps=3, stall_gain=1.0,
                   stall_margin=None)


def test_a_stalled_attempt_gives_its_steps_back_so_the_retry_gets_the_whole_cap(tmp_path):
    torch.manual_seed(0)
    meta = train_unit(tiny(vocab_size=480), SPEC, UNIT, tmp_path / "a", stage="text_s2")
    # no gain of 1.0 in 3 steps: attempts 1 and 2 stall at step 6 (their first validation, 3, opens the window);
    # each gives its 6 steps back, and attempt 3, the last, runs to the whole cap
    assert [(a["steps"], a["stopped_because"]) for a in meta["attempts"]] == [(6, STALLED), (6, STALLED),
                                                                               (12, "max_steps")]
    assert meta["steps"] == 24  # every step trained, each attempt's counted
    # the at-chance clause (a margin of 1.0: every validation is "at chance") ends an attempt at the same step,
    # with the no-gain clause off (a gain of 0.01 is no bar to a tiny model's noise, so it is not the clause here)
    torch.manual_seed(0)
    at_chance = replace(UNIT, stall_gain=1e-9, stall_margin=1.0)
    meta = train_unit(tiny(vocab_size=480), SPEC, at_chance, tmp_path / "b", stage="text_s2")
    assert [a["stopped_because"] for a in meta["attempts"]][:2] == [STALLED, STALLED]
    assert meta["attempts"][-1]["steps"] == 12


def test_a_stage_whose_stall_window_cannot_fire_before_its_cap_is_a_config_error():
    files = [ROOT / "config/config.yaml", ROOT / "config/mini.yaml"]
    config = vlconfig.load(files)
    vlconfig.validate(config)
    for stage, cap, where in [("noise_image_text", 3000, "noise_image_text"), ("image", 6000, "image"),
                              ("image_text", 4000, "image_text")]:
        bad = {**config, "stages": {**config["stages"], stage: {
            **config["stages"][stage], "train": {**config["stages"][stage]["train"], "max_steps": cap}}}}
        with pytest.raises(vlconfig.ConfigError, match=rf"stages\.{where}\.train\.max_steps.*stall_steps=3000"):
            vlconfig.validate(bad)
    # the rule off (no retry, or no window): any cap
    off = {**config, "train": {**config["train"], "stall_steps": None}}
    off["stages"] = {**config["stages"], "noise_image_text": {"train": {"binding_loss": 1.0, "max_steps": 100}}}
    vlconfig.validate(off)


def test_stall_margin_comes_from_the_divergence_section_and_reruns_only_where_it_changes():
    config = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    assert vlparams.stage_train(config, "image")["stall_margin"] == config["divergence"]["stall_margin"] == 0.05
    assert "stall_margin" not in vlparams.stage_params(config, "text_s1")["train"]  # the default: nothing reruns
    wider = {**config, "divergence": {**config["divergence"], "stall_margin": 0.1}}
    assert vlparams.stage_params(wider, "text_s1")["train"]["stall_margin"] == 0.1
    for cfg, margin in [(wider, 0.1), (config, 0.05)]:  # what the training job reads: its params
        train = vlparams.stage_params(cfg, "image", "render_cnn")["train"]
        assert TrainConfig.from_section(train, 0, "cpu", "fp32").stall_margin == margin
    # a stage whose validation mixes kinds names the part its rules read; a text stage's params are as before
    assert vlparams.stage_params(config, "image", "render_cnn")["val_judged"] == "retrieval"
    assert vlparams.stage_params(config, "curriculum_image", "render_cnn")["val_judged"] == "retrieval"
    assert "val_judged" not in vlparams.stage_params(config, "grounding")
    assert "val_judged" not in vlparams.stage_params(config, "text_s3")


@pytest.mark.parametrize("patience, min_delta", [(2, 0.002), (4, 0.01), (8, 0.002)])
def test_the_training_loop_s_plateau_rule_is_the_replayed_one(patience, min_delta):
    """attempts.plateau_end, the plateau rule replayed on a curve, stops where _Progress.validate does and keeps the
    same best step, on a rising curve with noise (a seeded draw)."""
    from vlbind.training.attempts import plateau_end

    rng = np.random.default_rng(1)
    accs = list(np.clip(1 - 0.8 * np.exp(-np.arange(1, 41) / 8) + rng.normal(0, 0.01, 40), 0, 1))
    cfg = TrainConfig(eval_every=250, target_accuracy=None, patience=patience, min_delta=min_delta, attempts=1)
    progress, zero, stop = _Progress(best_state={}), torch.zeros(1), None
    for i, acc in enumerate(accs, 1):
        progress.step = 250 * i
        if progress.validate(torch.nn.Linear(1, 1), acc, zero, zero, zero, 1.0, cfg, 0.25) == "plateau":
            stop = (progress.step, progress.best_step)
            break
    assert stop == plateau_end(250 * np.arange(1, 41), np.array(accs), patience, 250, min_delta)
    assert patience > 4 or stop is not None

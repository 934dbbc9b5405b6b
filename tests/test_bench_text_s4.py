"""benchmarks/bench_text_s4.py, the text_s4 sweep: its arms parse to the settings they name, a run writes its row
(steps, the ramp lengths passed, accuracies) and a run out of time keeps its row."""

import csv
import importlib.util
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from vlbind.checkpoint import optimizer_tensors, save_model, save_tensors
from vlbind.model import ModelConfig, Transformer
from vlbind.train import TrainConfig, make_optimizer

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("bench_text_s4", ROOT / "benchmarks/bench_text_s4.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_an_arm_names_its_levers():
    task, train, flags = bench.parse_arm("solo=0.5+lookup=0.2+ramp+carry+lr=3e-4+batch_size=256+one")
    assert task == {"solo_fraction": 0.5, "lookup_fraction": 0.2}
    assert train == {"lr": 3e-4, "batch_size": 256, "queries": "one", "warmup_steps": 0}  # carry: no second warm-up
    assert flags == {"ramp", "carry", "one"}
    assert bench.parse_arm("base") == ({}, {}, {"base"})
    with pytest.raises(ValueError, match="unknown lever 'rmap'"):
        bench.parse_arm("solo=0.5+rmap")


@pytest.fixture
def parent(tmp_path):
    """A tiny 'text_s3' model directory with its optimizer's state, as bench_dense_curriculum.py writes it."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(n_layers=1, d_model=16, d_ff=32, n_heads=2))
    opt = make_optimizer(model, TrainConfig())
    model(torch.zeros(1, 3, dtype=torch.long)).sum().backward()
    opt.step()
    save_model(tmp_path / "seed0", model, {"stage": "text_s3"}, pd.DataFrame())
    tensors, groups = optimizer_tensors(opt)
    save_tensors(tmp_path / "seed0" / bench.OPTIMIZER_FILE, tensors, {"param_groups": groups})
    return str(tmp_path / "seed{seed}")


def test_a_ramp_run_writes_its_row(tmp_path, parent):
    """Target 0: the 2-object stage passes at its one validation (its last step), the budget is then spent."""
    row = bench.run("solo=0.5+ramp+carry", 0, parent, False, 3, 0.0, "cpu", False, tmp_path)
    assert (row["status"], row["steps"], row["pass_2"], row["pass_3"]) == ("done", 3, 3, "")
    assert 0 <= row["acc_2"] <= 1 and 0 <= row["acc_2_8"] <= 1
    (written,) = csv.DictReader(open(tmp_path / "solo0.5_ramp_carry-seed0.csv"))
    assert written["pass_2"] == "3" and written["status"] == "done"


def test_a_run_out_of_time_keeps_its_row(tmp_path, parent):
    row = bench.run("base", 0, parent, False, 50, 0.95, "cpu", False, tmp_path, deadline=0.0)
    assert (row["status"], row["steps"], row["pass_8"]) == ("out_of_time", 1, "")


def test_the_curriculum_benchs_arm_sets_task_keys_for_every_stage_or_one(tmp_path):
    """bench_dense_curriculum.py: `symmetric_fraction@text_s1=0.25` sets that task key of text_s1 only; train keys
    go to every stage's train section."""
    spec = importlib.util.spec_from_file_location("bench_dense", ROOT / "benchmarks/bench_dense_curriculum.py")
    dense = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dense)
    rows = dense.run("all:symmetric_fraction@text_s1=0.25,lr=3e-4", 0, False, ["text_s1", "text_s2"], 1, None, "cpu",
                     tmp_path)
    assert [r["steps"] for r in rows] == [1, 1]
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert run.name == "all_symmetric_fraction@text_s1=0.25_lr=3e-4-seed0"  # the run's, not a task key's
    assert (tmp_path / f"{run.name}.csv").is_file()
    metas = {s: json.loads((run / s / "meta.json").read_text()) for s in ("text_s1", "text_s2")}
    assert metas["text_s1"]["stage_spec"]["symmetric_fraction"] == 0.25
    assert metas["text_s2"]["stage_spec"]["symmetric_fraction"] == 0.0  # mini's
    assert {m["train_config"]["lr"] for m in metas.values()} == {3e-4}

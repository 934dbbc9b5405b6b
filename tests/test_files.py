"""Damaged files name themselves and say how to fix them; a damaged resume state never blocks a rerun."""

import json
import logging

import numpy as np
import pandas as pd
import pytest
import torch
from test_train import CFG, SPEC, fresh, kill_at

from vlbind.core.files import CorruptFileError
from vlbind.data.bank import ImageBank
from vlbind.data.render import RenderConfig, layout_objects
from vlbind.model.checkpoint import load_model, save_model
from vlbind.training.loop import train_attempt
from vlbind.training.resume import RESUME_FILE


def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_a_truncated_model_file_names_itself(tmp_path):
    save_model(tmp_path, fresh(), {}, pd.DataFrame())
    truncate(tmp_path / "model.safetensors")
    with pytest.raises(CorruptFileError, match="model.safetensors is not a readable safetensors file") as e:
        load_model(tmp_path)
    assert str(tmp_path) in str(e.value) and "rerun the rule" in str(e.value)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_a_damaged_resume_state_is_moved_aside_and_the_stage_trains_from_its_start(tmp_path, caplog, damage):
    ref = fresh()
    train_attempt(ref, SPEC, CFG, tmp_path / "ref", stage="text_s1")
    kill_at(8, tmp_path / "run")
    state = tmp_path / "run" / RESUME_FILE
    truncate(state) if damage == "truncated" else state.write_bytes(b"\x00garbage" * 100)
    with caplog.at_level(logging.WARNING, logger="vlbind"):
        meta = train_attempt(fresh(), SPEC, CFG, tmp_path / "run", stage="text_s1")
    assert not meta["resumed"]
    assert (tmp_path / "run" / (RESUME_FILE + ".corrupt")).is_file()
    assert str(state) in caplog.text and "from its start" in caplog.text
    rerun, _ = load_model(tmp_path / "run")
    for k, v in ref.state_dict().items():
        assert torch.equal(rerun.state_dict()[k], v), k


@pytest.fixture
def bank_files(tmp_path):
    objects = layout_objects(RenderConfig(size=64, renderings=2))
    (tmp_path / "bank").mkdir()
    objects.to_parquet(tmp_path / "bank" / "objects.parquet")
    features = tmp_path / "features.npy"
    np.save(features, np.zeros((objects["image"].max() + 1, 4, 6), dtype=np.float16))
    features.with_suffix(".json").write_text(json.dumps({"tokens_per_image": 4, "dim": 6}))
    assert ImageBank.open(tmp_path / "bank", features).tokens_per_image == 4  # intact, it opens
    return tmp_path / "bank", features


@pytest.mark.parametrize("damage, why", [
    ("truncated", "mmap length|truncated|larger|EOF"),
    ("garbage", "not an .npy file|magic"),
    ("pickled", "pickled|Python objects"),
])
def test_a_damaged_feature_array_names_itself_and_never_suggests_unpickling(bank_files, damage, why):
    bank, features = bank_files
    if damage == "truncated":
        truncate(features)
    elif damage == "garbage":
        features.write_bytes(b"not numpy at all" * 64)
    else:
        np.save(features, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(CorruptFileError, match=why) as e:
        ImageBank.open(bank, features)
    assert str(features) in str(e.value) and "allow_pickle" not in str(e.value)


@pytest.mark.parametrize("text", ["{not json", '{"tokens_per_image": 9}'])
def test_a_damaged_features_index_names_itself(bank_files, text):
    bank, features = bank_files
    features.with_suffix(".json").write_text(text)
    with pytest.raises(CorruptFileError) as e:
        ImageBank.open(bank, features)
    assert str(features.with_suffix(".json")) in str(e.value)


def test_a_damaged_meta_json_names_itself_in_the_training_table(tmp_path):
    from vlbind.evaluation.tables import training_summary

    (tmp_path / "meta.json").write_text('{"stage": "text_s1", "ste')
    with pytest.raises(CorruptFileError, match="meta.json is not a readable model meta.json"):
        training_summary([tmp_path / "meta.json"])

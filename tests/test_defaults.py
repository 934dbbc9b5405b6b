"""Every default has one value: a settings dataclass's default equals the paper config's value for the same key
(config/config.yaml is the source of truth), and a schema default equals both. Keys a config section leaves out
have their one default in the dataclass."""

import dataclasses

import pytest
from test_config_reference import ROOT

from vlbind import config as vlconfig
from vlbind.evaluate import EvalConfig
from vlbind.interp.circuits import CircuitRule
from vlbind.interp.interchange import InterchangeConfig
from vlbind.interp.knockout import KnockoutConfig
from vlbind.interp.layer_relevance import LayerRelevanceConfig
from vlbind.interp.probes import ProbeConfig
from vlbind.model import ModelConfig
from vlbind.qwen.binding import BindingConfig
from vlbind.qwen.probes import QwenProbeConfig
from vlbind.qwen.prompts import Chat, PromptConfig
from vlbind.render import RenderConfig
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig

PAPER = vlconfig.load([ROOT / "config/config.yaml"])
SECTIONS = {TrainConfig: PAPER["train"], EvalConfig: PAPER["evaluate"], ProbeConfig: PAPER["interp"]["probes"],
            InterchangeConfig: PAPER["interp"]["interchange"], KnockoutConfig: PAPER["interp"]["knockout"],
            LayerRelevanceConfig: PAPER["interp"]["layer_relevance"], CircuitRule: PAPER["interp"]["circuits"],
            ModelConfig: PAPER["model"], RenderConfig: PAPER["render"], PromptConfig: PAPER["qwen"]["prompts"],
            Chat: PAPER["qwen"]["chat"], BindingConfig: PAPER["qwen"]["binding"],
            QwenProbeConfig: PAPER["qwen"]["probes"]}
# A config value of another kind than the field's: the config holds what the field is resolved from.
RESOLVED = {(TrainConfig, "precision")}  # a per-device mapping -> the precision of the device a job runs on


def plain(value):
    return list(value) if isinstance(value, tuple) else value


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_dataclass_defaults_equal_the_paper_config(cls):
    section, compared = SECTIONS[cls], 0
    for f in dataclasses.fields(cls):
        if f.name not in section or (cls, f.name) in RESOLVED:
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        assert default is not dataclasses.MISSING, f"{cls.__name__}.{f.name} has no default"
        assert plain(default) == plain(section[f.name]), f"{cls.__name__}.{f.name}: {default!r} vs config.yaml " \
                                                         f"{section[f.name]!r}"
        compared += 1
    assert compared >= 2


@pytest.mark.parametrize("definition, cls", [("train", TrainConfig), ("task", StageSpec)])
def test_schema_defaults_equal_the_dataclass_and_the_paper_config(definition, cls):
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    for key, value in vlconfig.schema_defaults(definition).items():
        assert defaults[key] == value, f"{definition}.{key}: schema {value!r} vs {cls.__name__} {defaults[key]!r}"
        if definition == "train":
            assert PAPER["train"][key] == value, key


def test_a_config_without_a_section_the_rules_read_names_it():
    for section in ("qwen", "device", "figure_note"):
        config = {k: v for k, v in PAPER.items() if k != section}
        with pytest.raises(vlconfig.ConfigError, match=f"'{section}' is a required property"):
            vlconfig.validate(config)

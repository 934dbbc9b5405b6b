"""Every default has one home: a settings dataclass's default equals the paper config's value for the same key
(config/config.yaml is the source of truth); the settings a config may leave out take theirs from the schema, and
config.yaml records the same value."""

import dataclasses

import pytest
from test_config_reference import ROOT

from vlbind import config as vlconfig
from vlbind import schema as vlschema
from vlbind.evaluate import EvalConfig
from vlbind.interp.circuits import CircuitRule
from vlbind.interp.interchange import InterchangeConfig
from vlbind.interp.knockout import KnockoutConfig
from vlbind.interp.layer_relevance import LayerRelevanceConfig
from vlbind.interp.probes import ProbeConfig
from vlbind.model import ModelConfig
from vlbind.outcomes import DivergenceRule
from vlbind.qwen.binding import BindingConfig
from vlbind.qwen.probes import QwenProbeConfig
from vlbind.qwen.prompts import Chat, PromptConfig
from vlbind.qwen.retrieval import Generation
from vlbind.render import RenderConfig
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig

PAPER = vlconfig.load([ROOT / "config/config.yaml"])
SECTIONS = {TrainConfig: PAPER["train"], EvalConfig: PAPER["evaluate"], ProbeConfig: PAPER["interp"]["probes"],
            InterchangeConfig: PAPER["interp"]["interchange"], KnockoutConfig: PAPER["interp"]["knockout"],
            LayerRelevanceConfig: PAPER["interp"]["layer_relevance"], CircuitRule: PAPER["interp"]["circuits"],
            ModelConfig: PAPER["model"], RenderConfig: PAPER["render"], PromptConfig: PAPER["qwen"]["prompts"],
            Chat: PAPER["qwen"]["chat"], BindingConfig: PAPER["qwen"]["binding"],
            QwenProbeConfig: PAPER["qwen"]["probes"], DivergenceRule: PAPER["divergence"],
            Generation: PAPER["qwen"]["generation"]}
# A config value of another kind than the field's: the config holds what the field is resolved from.
# A per-device mapping -> the entry of the device a job runs on (TrainConfig.from_section).
RESOLVED = {(TrainConfig, "precision"), (TrainConfig, "sub_batch_tokens")}


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
def test_an_optional_setting_has_its_one_default_in_the_schema_and_config_yaml_records_it(definition, cls):
    """The settings a config may leave out take their dataclass default from the schema (one home); config.yaml
    writes each down with its provenance, and must say the same. Left out of a stage, one holds that default."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    optional = vlschema.schema_defaults(definition)
    assert optional and {k: defaults[k] for k in optional} == optional
    for key, value in optional.items():
        if definition == "train":
            assert PAPER["train"][key] == value, key
    given = vlconfig.stage_section(PAPER, "text_s3")["task"] if definition == "task" else PAPER["train"]
    section = {k: v for k, v in given.items() if k not in optional}
    if definition == "task":
        built = StageSpec.from_dict(section)
    else:
        built = TrainConfig.from_section(section, 0, "cpu", "fp32")
    assert {k: getattr(built, k) for k in optional} == optional


def test_a_config_without_a_section_the_rules_read_names_it():
    for section in ("qwen", "device", "figure_note"):
        config = {k: v for k, v in PAPER.items() if k != section}
        with pytest.raises(vlconfig.ConfigError, match=f"'{section}' is a required property"):
            vlconfig.validate(config)

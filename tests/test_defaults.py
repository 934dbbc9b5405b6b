"""Every default has one home: a settings dataclass writes no value config.yaml holds but reads it there
(settings.config_defaults, from config/config.yaml shipped with the package); the settings a config may leave out
take theirs from the schema, and config.yaml does not repeat them."""

import dataclasses
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml
from test_config_reference import ROOT

from vlbind import config as vlconfig
from vlbind import schema as vlschema
from vlbind.encoder_pretrain import PretrainConfig
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
from vlbind.settings import DEFAULTS_FILE, config_defaults
from vlbind.tasks import StageSpec
from vlbind.train import TrainConfig

PAPER = vlconfig.load([ROOT / "config/config.yaml"])
SECTIONS = {TrainConfig: "train", EvalConfig: "evaluate", ProbeConfig: "interp.probes",
            InterchangeConfig: "interp.interchange", KnockoutConfig: "interp.knockout",
            LayerRelevanceConfig: "interp.layer_relevance", CircuitRule: "interp.circuits", ModelConfig: "model",
            RenderConfig: "render", PromptConfig: "qwen.prompts", Chat: "qwen.chat", BindingConfig: "qwen.binding",
            QwenProbeConfig: "qwen.probes", DivergenceRule: "divergence", Generation: "qwen.generation"}
# A config value of another kind than the field's: the config holds what the field is resolved from.
# A per-device mapping -> the entry of the device a job runs on (TrainConfig.from_section).
RESOLVED = {(TrainConfig, "precision"), (TrainConfig, "sub_batch_tokens")}


# ModelConfig's projector fields are config.yaml's `projector` section
ELSEWHERE = {(ModelConfig, "projector_mult"): "projector.mult", (ModelConfig, "projector_scale"): "projector.scale"}


def plain(value):
    return list(value) if isinstance(value, tuple) else value


def paper_value(path: str):
    node = PAPER
    for part in path.split("."):
        node = node[part]
    return node


@pytest.mark.parametrize("cls", SECTIONS, ids=lambda c: c.__name__)
def test_a_settings_dataclass_reads_every_value_config_yaml_holds_and_writes_none(cls):
    """A field whose key config.yaml holds has no default written in the code: it is read from config.yaml (the
    merged paper config here, read independently), and equals it."""
    section, optional = paper_value(SECTIONS[cls]), vlschema.schema_defaults("train") if cls is TrainConfig else {}
    held = {f.name: f"{SECTIONS[cls]}.{f.name}" for f in dataclasses.fields(cls)
            if f.name in section and (cls, f.name) not in RESOLVED and f.name not in optional}
    held |= {name: path for (owner, name), path in ELSEWHERE.items() if owner is cls}
    assert len(held) >= 2 and cls.defaults_from == held
    for f in dataclasses.fields(cls):
        if f.name in held:
            assert plain(f.default) == plain(paper_value(held[f.name])), f"{cls.__name__}.{f.name}"


def test_a_default_config_yaml_lacks_is_an_error_naming_the_key_and_the_file():
    with pytest.raises(vlconfig.ConfigError, match=r"config\.yaml: no model\.not_a_key, the default of Probe\.not_"):
        @dataclasses.dataclass
        @config_defaults("model")
        class Probe:
            n_layers: int
            not_a_key: int


def test_the_packaged_defaults_are_config_yaml_and_a_wheel_ships_them(tmp_path):
    """In the source tree the package's config.yaml is config/config.yaml (a link); a wheel built from a copy of the
    tree (a non-editable install) carries its text."""
    assert DEFAULTS_FILE.resolve() == (ROOT / "config/config.yaml").resolve()
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src/vlbind", tree / "src/vlbind", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (tree / "config").mkdir()
    for name in ("pyproject.toml", "config/config.yaml"):
        shutil.copy(ROOT / name, tree / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path), str(tree)], check=True, cwd=tree)
    (wheel,) = tmp_path.glob("vlbind-*.whl")
    with zipfile.ZipFile(wheel) as z:
        assert z.read("vlbind/config.yaml").decode() == (ROOT / "config/config.yaml").read_text()


@pytest.mark.parametrize("definition, cls", [("train", TrainConfig), ("task", StageSpec)])
def test_an_optional_setting_has_its_one_default_in_the_schema_and_config_yaml_records_it(definition, cls):
    """The settings a config may leave out take their dataclass default from the schema (one home), and config.yaml
    does not repeat it. Left out of a stage, one holds that default."""
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    optional = vlschema.schema_defaults(definition)
    assert optional and {k: defaults[k] for k in optional} == optional
    # config.yaml writes one only to set the paper's scale apart from the default (train.stall_steps: mini's 3,000)
    assert all(PAPER[definition][k] != optional[k] for k in set(optional) & set(PAPER[definition]))
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


@pytest.mark.parametrize("build, key, bad", [
    (lambda v: TrainConfig(lr=v), "lr", 0.0),
    (lambda v: StageSpec(noise_fraction=v), "noise_fraction", 1.5),
    (lambda v: EvalConfig(orders=v), "orders", ("shuffled", "shuffled")),
    (lambda v: EvalConfig(max_objects=v), "max_objects", 33),
    (lambda v: RenderConfig(n_colors=v), "n_colors", 217),
    (lambda v: RenderConfig(layout=v), "layout", "grid"),
    (lambda v: PretrainConfig(renderings=v), "renderings", 1),
    (lambda v: BindingConfig(spike_fraction=v), "spike_fraction", 0.0),
], ids=lambda x: x if isinstance(x, str) else None)
def test_a_settings_dataclass_checks_a_value_against_the_schema_and_names_it(build, key, bad):
    """Types and ranges have one home, the schema: a dataclass built in code with a value a config could not hold
    fails naming the key and the value."""
    shown = repr(list(bad) if isinstance(bad, tuple) else bad)  # a tuple field is checked as the config's list
    with pytest.raises(ValueError, match=rf"[A-Za-z]+\.{key}={re.escape(shown)}"):
        build(bad)


def test_config_yaml_s_header_lists_every_setting_it_leaves_to_the_schema_at_the_schema_s_value():
    """config.yaml's header names each setting a config may leave out (`section.key: value`), so that read alone it
    says what is on: the list and its values are the schema's defaults, and a new default cannot escape it."""
    header = (ROOT / "config/config.yaml").read_text().split("\n\n")[0]
    listed = {}
    for section, key, value in re.findall(r"\b(train|task)\.(\w+): ([^;\s]+?)[;.]?(?=\s|$)", header):
        listed[f"{section}.{key}"] = yaml.safe_load(value)
    schema = {f"{d}.{k}": v for d in ("train", "task") for k, v in vlschema.schema_defaults(d).items()}
    written = {f"train.{k}" for k in PAPER["train"]} | {f"task.{k}" for k in PAPER["task"]}
    assert listed == {k: v for k, v in schema.items() if k not in written}
    assert "train.stall_steps 5000" in header and PAPER["train"]["stall_steps"] == 5000  # the one written, named

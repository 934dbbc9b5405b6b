"""Every default has one home: a settings dataclass writes no value config.yaml holds but reads it there
(settings.config_defaults, from config/config.yaml shipped with the package); the settings a config may leave out
take theirs from the schema, and config.yaml does not repeat them."""

import dataclasses
import importlib
import pkgutil
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import yaml
from test_config_reference import ROOT

from vlbind import config as vlconfig
from vlbind import params as vlparams
from vlbind.core import schema as vlschema
from vlbind.core.settings import DEFAULTS_FILE, SETTINGS, config_defaults
from vlbind.data.render import RenderConfig
from vlbind.data.spec import StageSpec
from vlbind.evaluation.evaluate import EvalConfig
from vlbind.model.transformer import ModelConfig
from vlbind.qwen.binding import BindingConfig
from vlbind.training.config import TrainConfig
from vlbind.vision.pretrain import PretrainConfig

PAPER = vlconfig.load([ROOT / "config/config.yaml"])
# A config value of another kind than the field's: the config holds what the field is resolved from.
# A per-device mapping -> the entry of the device a job runs on (TrainConfig.from_section).
RESOLVED = {(TrainConfig, "precision"), (TrainConfig, "sub_batch_tokens")}
# ModelConfig's projector fields are config.yaml's `projector` section
ELSEWHERE = {(ModelConfig, "projector_mult"): "projector.mult", (ModelConfig, "projector_scale"): "projector.scale",
             (TrainConfig, "stall_margin"): "divergence.stall_margin"}
# The one default in code of a key configs may leave out, and why (spec.StageSpec): a schema default would drop the
# `image_fraction: 0.0` the image arm's stages write from their params and rerun them in every finished tree
IN_CODE = {(StageSpec, "image_fraction")}
# dataclasses that hold no config section: data, results, the vocabulary (the one home of its sizes)
NOT_SETTINGS = {"Vocab", "Batch", "ImageBank", "_Progress", "Validation", "Pairs", "BoxesPair", "ProbePrompt",
                "RetrievalPrompt"}


def plain(value):
    return list(value) if isinstance(value, tuple) else value


def paper_value(path: str):
    node = PAPER
    for part in path.split("."):
        node = node[part]
    return node


def every_dataclass() -> dict[str, type]:
    """Every dataclass the package defines, by name (its modules imported)."""
    import vlbind
    found = {}
    for m in pkgutil.walk_packages(vlbind.__path__, "vlbind."):
        if not m.name.endswith("__main__"):
            module = importlib.import_module(m.name)
            found |= {name: obj for name, obj in vars(module).items() if dataclasses.is_dataclass(obj)
                      and isinstance(obj, type) and obj.__module__ == m.name}
    return found


FOUND = every_dataclass()  # imports every module, so that SETTINGS holds every class before the tests are listed


def test_every_dataclass_is_a_registered_settings_class_or_holds_no_config_section():
    """A new settings class cannot escape the check below: it registers through settings.config_defaults."""
    found = FOUND
    assert {n for n, c in found.items() if c not in SETTINGS} == NOT_SETTINGS
    assert set(SETTINGS) <= set(found.values()) and len(SETTINGS) >= 19


@pytest.mark.parametrize("cls", list(SETTINGS), ids=lambda c: c.__name__)
def test_a_settings_dataclass_takes_each_default_from_its_one_home(cls):
    """Each field's default comes from one home: config.yaml's value where config.yaml holds the key (the field
    writes none: settings.config_defaults reads it), else the schema's default of a key a config may leave out; a
    key with neither is required (no default); a field no config sets (one a job resolves, a caller's argument)
    keeps its own. A section of entries by name ("encoders.*") has no config.yaml value."""
    section = SETTINGS[cls]
    held = {} if "*" in section else paper_value(section)
    optional = vlschema.schema_defaults(section)
    keys = vlschema.section_schema(section).get("properties", {})
    assert keys, section
    expect = {}  # {field: the config.yaml key its default is}, as config_defaults records it
    for f in dataclasses.fields(cls):
        code = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        where = f"{cls.__name__}.{f.name}"
        if (cls, f.name) in ELSEWHERE:
            expect[f.name] = ELSEWHERE[cls, f.name]
            assert plain(code) == plain(paper_value(ELSEWHERE[cls, f.name])), where
        elif (cls, f.name) in RESOLVED or f.name not in keys:
            continue  # not a config value: its own default, if any
        elif f.name in optional:
            assert plain(code) == plain(optional[f.name]), where
            assert f.name not in literal_defaults(cls), f"{where}: a literal repeats the schema's default; read it"
        elif f.name in held:
            expect[f.name] = f"{section}.{f.name}"
            assert plain(code) == plain(held[f.name]), where
        elif (cls, f.name) in IN_CODE:
            assert code is not dataclasses.MISSING, where
        else:
            assert code is dataclasses.MISSING, f"{where}: a key without a default anywhere is required"
    assert cls.defaults_from == expect


def literal_defaults(cls) -> set[str]:
    """The fields whose default `cls`'s source writes as a literal (a number, string, bool, None or a tuple of them),
    not read from its home."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            try:
                ast.literal_eval(node.value)
            except ValueError:
                continue
            found.add(node.target.id)
    return found


def test_no_reader_of_a_stage_s_settings_falls_back_to_a_default_of_its_own():
    """params.stage_train gives every train key (the schema's defaults under the config's), and a stage's task holds
    every task key but image_fraction (spec.StageSpec's, read from there): a `.get(key, literal)` on either would be
    a second home of a default, which drifts."""
    pattern = re.compile(r'(stage_train\([^)]*\)|\["task"\]|\["train"\])\.get\("\w+", [^)]')
    found = [f"{p.relative_to(ROOT)}:{i}" for p in sorted((ROOT / "src/vlbind").rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1)
             if pattern.search(line) and "StageSpec.image_fraction" not in line]
    assert not found, found


def test_config_yaml_writes_no_key_at_the_schema_s_default():
    """A setting a config may leave out has its default in the schema only: config.yaml writes it only to set the
    paper's scale apart (train.stall_steps), and an encoder entry only what differs from the schema's."""
    for section in {s for s in SETTINGS.values()}:
        optional = vlschema.schema_defaults(section)
        entries = ([paper_value(section.split(".*")[0])[name] for name in paper_value(section.split(".*")[0])]
                   if "*" in section else [paper_value(section)])
        for entry in entries:
            entry = entry or {}
            if section.endswith(".pretrain"):
                entry = entry.get("pretrain") or {}
            same = {k for k in set(optional) & set(entry) if entry[k] == optional[k]}
            assert not same, (section, same)


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
    given = vlparams.stage_section(PAPER, "text_s3")["task"] if definition == "task" else PAPER["train"]
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


def test_the_paper_task_draws_from_the_whole_vocabulary():
    """config.yaml's task sizes (the paper's: every color, shape and item after text_s1) and the vocabulary's token
    groups are one number each, checked against each other; a color token stands for one web-safe color."""
    from vlbind.core.vocab import WEB_SAFE, Vocab

    task = PAPER["task"]
    assert (task["n_colors"], task["n_shapes"], task["n_items"]) == (Vocab.n_colors, Vocab.n_shapes, Vocab.n_items)
    assert Vocab.n_colors == len(WEB_SAFE)

"""The bottom floor of settings: the config error, the library's defaults (config.yaml, read into the settings
dataclasses by `config_defaults`), building settings dataclasses from plain dicts (config sections), rejecting
unknown keys by name, and the one stop reason that torch-free verdicts read. Imports nothing of vlbind."""

from __future__ import annotations

import functools
import inspect
from dataclasses import fields
from pathlib import Path
from typing import TypeVar

import yaml

T = TypeVar("T")

# why a stage stopped (meta.json's stopped_because): more than train.max_skipped_steps of its steps had a non-finite
# loss or gradient (vlbind.training.loop); outcomes.divergence marks such a run
NON_FINITE = "non_finite"


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the key and what would be valid."""


# config/config.yaml, the paper's configuration, shipped with the package (in the source tree a link to it): the one
# home of the library's defaults, so `ModelConfig()` is the model config.yaml trains, installed or not
DEFAULTS_FILE = Path(__file__).parents[1] / "config.yaml"


def read_yaml(text: str):
    """YAML text as yaml.safe_load reads it, parsed by libyaml's C parser where PyYAML has it (several times faster
    than its Python one: every job reads config.yaml and the schema)."""
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


@functools.cache
def _defaults() -> dict:
    try:
        return read_yaml(DEFAULTS_FILE.read_text())
    except OSError as e:
        raise ConfigError(f"{DEFAULTS_FILE}: cannot read the library's defaults ({e}); it is config/config.yaml, "
                          "shipped with the package: reinstall vlbind (pip install -e .)") from e


# Every settings dataclass, by the config section it holds (config_defaults): tests/test_defaults.py checks each
# field's default against its one home
SETTINGS: dict[type, str] = {}


def config_defaults(section: str, **keys: str):
    """Class decorator, written under @dataclass: each field the class writes without a default takes config.yaml's
    value of the same key in `section` (dotted: "interp.probes"), or of the dotted path `keys` names for it
    (`projector_mult="projector.mult"`); a list becomes a tuple. Fields with a default of their own are not
    config.yaml's (a setting a config may leave out: the schema's; one a job resolves: its fallback). A section of
    entries by name ("encoders.*") has no config.yaml default: its fields without one are required. Registers the
    class in SETTINGS."""

    def lookup(path: str, owner: str):
        node = _defaults()
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                raise ConfigError(f"{DEFAULTS_FILE}: no {path}, the default of {owner}")
            node = node[part]
        return tuple(node) if isinstance(node, list) else node

    def fill(cls):
        read = {} if "*" in section else {name: keys.get(name, f"{section}.{name}")
                                          for name in inspect.get_annotations(cls) if name not in cls.__dict__}
        for name, path in read.items():
            setattr(cls, name, lookup(path, f"{cls.__name__}.{name}"))
        cls.defaults_from = read  # {field: the config.yaml key its default is}
        SETTINGS[cls] = section
        return cls

    return fill


def from_dict(cls: type[T], d: dict) -> T:
    """cls(**d), but an unknown key raises ValueError naming it and the valid ones."""
    names = {f.name for f in fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}; valid: {sorted(names)}")
    return cls(**d)

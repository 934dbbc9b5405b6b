"""The bottom floor of settings: the config error, building settings dataclasses from plain dicts (config
sections), rejecting unknown keys by name, and the one stop reason that torch-free verdicts read. Imports nothing
of vlbind."""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")

# why a stage stopped (meta.json's stopped_because): more than train.max_skipped_steps of its steps had a non-finite
# loss or gradient (vlbind.train); outcomes.divergence marks such a run
NON_FINITE = "non_finite"


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the key and what would be valid."""


def from_dict(cls: type[T], d: dict) -> T:
    """cls(**d), but an unknown key raises ValueError naming it and the valid ones."""
    names = {f.name for f in fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}; valid: {sorted(names)}")
    return cls(**d)

"""The bottom floor of settings: the config error, and building settings dataclasses from plain dicts (config
sections), rejecting unknown keys by name. Imports nothing of vlbind."""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value that cannot be used; the message names the key and what would be valid."""


def from_dict(cls: type[T], d: dict) -> T:
    """cls(**d), but an unknown key raises ValueError naming it and the valid ones."""
    names = {f.name for f in fields(cls)}
    unknown = set(d) - names
    if unknown:
        raise ValueError(f"unknown {cls.__name__} keys {sorted(unknown)}; valid: {sorted(names)}")
    return cls(**d)

"""Writing files so that readers never see half of one, and reading them so that a damaged one names itself
(no torch import: rendering and tables use it too)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np


def atomic_write(path: Path, write) -> None:
    """Call write(tmp_path) and move the result onto `path` in one step, so readers never see half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CorruptFileError(ValueError):
    """A file that exists but cannot be read as what it should be; the message names it and the fix."""

    def __init__(self, path, what: str, why) -> None:
        super().__init__(f"{path} is not a readable {what} ({why}); delete it and rerun the rule that writes it")
        self.path = Path(path)


def write_json(path, obj) -> None:
    """`obj` as indented JSON at `path`, atomically."""
    atomic_write(path, lambda tmp: Path(tmp).write_text(json.dumps(obj, indent=2) + "\n"))


def read_json(path, what: str = "JSON file") -> dict:
    try:
        return json.loads(Path(path).read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CorruptFileError(path, what, e) from None


def load_npy(path, what: str = ".npy array", mmap_mode: str | None = "r") -> np.ndarray:
    """np.load without pickles; a truncated or foreign file raises CorruptFileError."""
    try:
        return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
    except FileNotFoundError:
        raise
    except (ValueError, OSError, EOFError) as e:
        why = "it holds pickled objects or is not an .npy file" if "pickle" in str(e) else e
        raise CorruptFileError(path, what, why) from None

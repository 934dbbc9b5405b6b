"""Writing files so that readers never see half of one (no torch import: rendering and tables use it too)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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

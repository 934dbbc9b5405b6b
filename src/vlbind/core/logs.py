"""The logging setup every Snakemake adapter (scripts/) shares: one log file per rule, plus an optional
history file that outlives Snakemake's deletion of a rule's log."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path


def setup_logging(path: str | None = None, level=logging.INFO, history: str | Path | None = None) -> logging.Logger:
    """Log with timestamps to `path` (a rule's log file), or to stderr when no path is given, and to
    `history` as well when given.

    Files are appended to, and each attempt starts with a "job started" line. Snakemake deletes a job's log
    before it runs the job again, so a training job passes `history` (a file beside its resume state): a job
    killed and run again resumes where it stopped, and that file keeps the killed attempt's lines."""
    paths = [Path(p) for p in (path, history) if p]
    for p in paths:
        p.parent.mkdir(parents=True, exist_ok=True)
    handlers = [logging.FileHandler(p, mode="a") for p in paths] or [logging.StreamHandler(sys.stderr)]
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        handlers=handlers, force=True)
    log = logging.getLogger("vlbind")
    if path:
        log.info("job started (pid %d)", os.getpid())

        def excepthook(kind, value, tb):
            log.critical("failed", exc_info=(kind, value, tb))
            sys.__excepthook__(kind, value, tb)
        sys.excepthook = excepthook  # a rule's failure shows in its log file, not only in Snakemake's output
    return log

import os
import sys
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker per CPU (pyproject.toml's addopts): one thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from each other


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's, which reads the group
def pytest_collection_modifyitems(items):
    """A test that needs the smoke DAG built (fixture smoke_tree) is slow (`-m "not slow"` leaves it out), and runs
    on the one pytest-xdist worker that builds it (group "smoke_tree"; the other workers take the other tests)."""
    for item in items:
        if "smoke_tree" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("smoke_tree"))

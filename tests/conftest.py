import os
import sys
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker per CPU (pyproject.toml's addopts): one thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from each other


def pytest_collection_modifyitems(items):
    """A test that needs the smoke DAG built (fixture smoke_tree) is slow: `-m "not slow"` leaves it out. Those tests
    go first, so that under xdist a worker starts building the tree (the suite's longest path) at once."""
    smoke = {id(item) for item in items if "smoke_tree" in getattr(item, "fixturenames", ())}
    for item in items:
        if id(item) in smoke:
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: id(item) not in smoke)  # stable: each group keeps its order

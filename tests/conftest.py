import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from each other


def pytest_collection_modifyitems(items):
    """A test that needs the smoke DAG built (fixture smoke_tree) is slow: `-m "not slow"` leaves it out."""
    import pytest

    for item in items:
        if "smoke_tree" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)

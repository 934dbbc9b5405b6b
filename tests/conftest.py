import os
import sys
from pathlib import Path

import pytest
from filelock import FileLock

if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker per CPU (pyproject.toml's addopts): one thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from each other

# the files whose tests need the smoke tree: its own tests (first), and those that only read it (last)
SMOKE_FILES = {"test_smoke_dag.py": 0, "test_smoke_tree_use.py": 2}


def pytest_collection_modifyitems(items):
    """A test that needs the smoke DAG built (fixture smoke_tree) is slow: `-m "not slow"` leaves it out. The smoke
    tree's own tests go first, so that under xdist (`--dist loadfile`: a file to a worker) one worker starts building
    the tree, the suite's longest path, at once; the tests that only read it go last, so that another worker takes
    them once the rest is done, and waits for the tree only if it is not built yet."""
    for item in items:
        if "smoke_tree" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: SMOKE_FILES.get(item.path.name, 1))  # stable: each group keeps its order


def build_smoke_tree(work: Path) -> Path:
    """The default target (every figure and table) and the Qwen sub-DAG on tiny models of config/smoke.yaml, in one
    scheduler, in a copy of the workflow at `work`; snakemake's output in snakemake.out, written last."""
    from test_workflow import copy_workflow, snakemake

    copy_workflow(work)
    proc = snakemake(work, "all", "qwen_all", "--configfile", "config/smoke.yaml")
    (work / "snakemake.out").write_text(proc.stdout + proc.stderr)
    return work


@pytest.fixture(scope="session")
def smoke_tree(tmp_path_factory, worker_id):
    """The smoke tree, built once per session. Under xdist the first worker that needs it builds it in the session's
    temporary folder, which the workers share, holding a lock; another worker that needs it waits on that lock."""
    if worker_id == "master":  # one process
        return build_smoke_tree(tmp_path_factory.mktemp("smoke"))
    shared = tmp_path_factory.getbasetemp().parent  # this session's, above each worker's own
    with FileLock(shared / "smoke.lock"):
        if not (shared / "smoke/snakemake.out").exists():
            build_smoke_tree(shared / "smoke")
    return shared / "smoke"

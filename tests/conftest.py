import os
import sys
from pathlib import Path

import pytest
from filelock import FileLock

if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker per CPU (pyproject.toml's addopts): one thread each
    os.environ.setdefault("OMP_NUM_THREADS", "1")

sys.path.insert(0, str(Path(__file__).parent))  # tests import shared helpers from each other


def pytest_collection_modifyitems(items):
    """A test that needs the smoke DAG built (fixture smoke_tree) is slow: `-m "not slow"` leaves it out. Under xdist
    a file goes to one worker, the biggest files first (pytest-xdist's loadscope reorder), so the DAG starts a little
    after the others; starting it first did not shorten the suite, which is CPU-bound (docs/results/benchmarks-suite.md,
    "Where the tree's build starts")."""
    for item in items:
        if "smoke_tree" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)


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

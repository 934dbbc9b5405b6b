"""Every script in benchmarks/ still imports and answers --help (a moved name broke one before: bench_text_arm.py).
Run in-process (runpy, as `python benchmarks/X.py --help`): the imports are the suite's own, a second each."""

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_imports_and_answers_help(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(script), run_name="__main__")
    assert done.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out

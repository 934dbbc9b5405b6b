"""Every script in benchmarks/ still imports and answers --help (a moved name broke one before: bench_text_arm.py).
Run in-process (runpy, as `python benchmarks/X.py --help`): the imports are the suite's own, a second each."""

import runpy
import sys
from pathlib import Path

import pandas as pd
import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_a_benchmark_imports_and_answers_help(script, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [str(script), "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_path(str(script), run_name="__main__")
    assert done.value.code in (0, None)
    assert "usage:" in capsys.readouterr().out


def test_run_cost_times_a_job_the_run_lacked_as_its_rules_median():
    """bench_run_cost's other jobs: their own seconds, the sum of the jobs a job was made as, else the median of its
    rule's jobs in the DAG that the run had, as counted (arm P evaluates and analyses text_long, the complete run
    did not; an analysis job was several there), else none (counted 0)."""
    cost = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "bench_run_cost.py"))
    jobs = ["evaluate/a/seed0", "evaluate/b/seed0", "evaluate/c/seed0", "interp/x/p", "interp/x/q"]
    others = pd.DataFrame({"job": jobs,
                           "rule": ["evaluate", "evaluate", "evaluate", "interp", "interp"],
                           "seconds": [10.0, 40.0, 13.0, 2.0, 3.0]})
    job = {"job": "evaluate/b/seed0", "rule": "evaluate", "outputs": []}
    assert cost["other_seconds"](job, others) == (40.0, "own")
    several = {"job": "analyze/x", "rule": "analyze",
               "outputs": ["results/interp/x/p.parquet", "results/interp/x/q.csv"]}
    assert cost["other_seconds"](several, others) == (5.0, "own")
    lacked = {"job": "evaluate/text_long/seed0", "rule": "evaluate",
              "outputs": ["results/eval/text_long/seed0.parquet"]}
    assert cost["other_seconds"](lacked, others) == (0.0, "")
    # in the DAG: the lacked jobs take the median of their rule's jobs as counted (an analysis: its parts' sum)
    dag = pd.DataFrame([job, several, lacked, {"job": "analyze/text_long", "rule": "analyze", "outputs": []},
                        {"job": "all", "rule": "all", "outputs": []}])
    timed = [cost["other_seconds"](j, others) for _, j in dag.iterrows()]
    dag["seconds"], dag["timed_as"] = [t for t, _ in timed], [a for _, a in timed]
    filled = cost["fill_by_rule"](dag).set_index("job")
    assert (filled.loc["evaluate/text_long/seed0", "seconds"], filled.loc["evaluate/text_long/seed0", "timed_as"]) \
        == (40.0, "rule")  # the one evaluate job of the DAG the run had
    assert (filled.loc["analyze/text_long", "seconds"], filled.loc["analyze/text_long", "timed_as"]) == (5.0, "rule")
    assert (filled.loc["all", "seconds"], filled.loc["all", "timed_as"]) == (0.0, "")


def test_run_cost_counts_a_stage_that_waited_out_a_certain_plateau_to_its_best_step():
    """--certain-plateau: only a stage that the plateau rule ended in one attempt, keeping a best validation no
    validation could beat by min_delta, is counted to its best step (what the loop trains since it stops there)."""
    cost = runpy.run_path(str(Path(__file__).resolve().parents[1] / "benchmarks" / "bench_run_cost.py"))
    train = {"min_delta": 1 / 512, "keep": None}
    row = {"stopped_because": "plateau", "attempts": 1, "best_val_accuracy": 1.0}
    certain = lambda **change: cost["certain_plateau"](pd.Series({**row, **change}), train)  # noqa: E731
    assert certain()
    assert not certain(best_val_accuracy=511 / 512)  # 511/512 + 1/512 is not above 1
    assert not certain(attempts=2)  # an earlier attempt's steps are in the row's
    assert not certain(stopped_because="max_steps")
    assert not cost["certain_plateau"](pd.Series(row), {**train, "keep": "last"})

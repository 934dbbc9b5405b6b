"""docs/results/paper-rules/arms.sh, issue 87's run recipe, on trees whose Snakemake is a stand-in that records its
arguments: a reusing arm starts a seed once arm P's stage has ended, and with the arm's configs and targets; `stop`
signals the arms under RUNS and nothing else; a tree started on another CPU kind is refused."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ARMS = Path(__file__).resolve().parents[1] / "docs/results/paper-rules/arms.sh"
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="arms.sh reads /proc")


def cpu_kind() -> str:
    script = ARMS.read_text().split("cpu_kind() {", 1)[1].split("\n\n", 1)[0]
    return subprocess.run(["bash", "-c", "cpu_kind() {" + script + "\ncpu_kind"], capture_output=True, text=True,
                          check=True).stdout.strip()


def fake_tree(runs: Path, name: str, kind: str) -> Path:
    tree = runs / name
    (tree / ".venv/bin").mkdir(parents=True)
    (tree / "stretches.txt").write_text(f"tree: commit abc, created now on {kind}\n")
    snakemake = tree / ".venv/bin/snakemake"
    snakemake.write_text('#!/bin/bash\n[[ $1 == --unlock ]] && exit 0\necho "ARGS: $*"\nsleep 61\n')
    snakemake.chmod(0o755)
    return tree


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended


def arms(runs: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(ARMS), *args], env={**os.environ, "RUNS": str(runs), **env},
                          capture_output=True, text=True, timeout=60)


def wait_for(path: Path, seconds: float = 10.0) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.is_file() and path.read_text():
            return path.read_text()
        time.sleep(0.1)
    raise AssertionError(f"{path} was not written within {seconds} s")


def test_a_reusing_arm_starts_the_seeds_whose_parent_stage_ended_and_stop_signals_only_its_own(tmp_path):
    runs = tmp_path / "runs"
    tree = fake_tree(runs, "eval1000-abc", cpu_kind())
    (runs / "paper-rules-abc/results/models/seed1/text_s5").mkdir(parents=True)
    (runs / "paper-rules-abc/results/models/seed1/text_s5/meta.json").write_text("{}")
    (runs / "paper-rules-abc/results/models/seed0/text_s5").mkdir(parents=True)  # still training: no meta.json
    # a Snakemake outside RUNS, which stop must leave alone
    outsider = subprocess.Popen(["bash", "-c", "exec -a 'snakemake --rerun-incomplete' sleep 60"], cwd=tmp_path)
    try:
        assert arms(runs, "start", "K", "abc", SEEDS="0 1").returncode == 0
        args = wait_for(tree / "seed1.log")
        assert args.strip() == ("ARGS: --rerun-incomplete --cores 1 --nolock --configfile config/mini.yaml "
                                "config/experiments/paper_rules.yaml config/experiments/eval_1000.yaml reuse.yaml "
                                "-- results/eval/text_only/seed1.parquet")
        assert not (tree / "seed0.log").exists()
        assert (tree / "reuse.yaml").read_text() == (
            f"reuse: {{tree: {runs}/paper-rules-abc/results, stages: [text_s1, text_s2, text_s3, text_s4, text_s5]}}\n")
        watcher = int(wait_for(tree / "watch.pid"))
        for _ in range(100):  # the stand-in's sleep, in the arm's session
            if arm := subprocess.run(["pgrep", "-f", "sleep 61"], capture_output=True, text=True).stdout.split():
                break
            time.sleep(0.1)
        if Path(f"/proc/{arm[0]}/autogroup").is_file():  # a kernel with autogroups: the arm's session at nice 5
            for _ in range(100):  # the stretch line follows the share's setting
                if "stretch: seed1" in (tree / "stretches.txt").read_text():
                    break
                time.sleep(0.1)
            assert "autogroup nice 5" in (tree / "stretches.txt").read_text()
            assert Path(f"/proc/{arm[0]}/autogroup").read_text().split()[-1] == "5"

        again = arms(runs, "start", "K", "abc", SEEDS="0 1")  # its watcher runs: refused
        assert again.returncode == 1 and "watcher runs already" in again.stderr
        os.killpg(watcher, 15)  # the watcher gone, seed 1's Snakemake still running: a new watcher leaves it alone
        for _ in range(50):
            if not alive(watcher):
                break
            time.sleep(0.1)
        assert arms(runs, "start", "K", "abc", SEEDS="0 1").returncode == 0
        watcher = int(wait_for(tree / "watch.pid"))
        time.sleep(1)
        assert (tree / "seed1.log").read_text().count("ARGS:") == 1

        assert arms(runs, "stop").returncode == 0
        time.sleep(0.5)
        assert outsider.poll() is None, "stop signalled a Snakemake outside RUNS"
        assert not subprocess.run(["pgrep", "-f", "sleep 61"]).returncode == 0, "the arm's Snakemake outlived stop"
        assert not alive(watcher), "the watcher outlived stop"
        lines = (tree / "stretches.txt").read_text().splitlines()
        assert lines[1].startswith("stretch: seed1 started ") and lines[2].startswith("stretch: ended ")
    finally:
        outsider.kill()


def test_a_tree_started_on_another_cpu_kind_is_refused(tmp_path):
    runs = tmp_path / "runs"
    fake_tree(runs, "paper-rules-abc", "AMD EPYC, family 23 model 1, fp32" if "bf16" in cpu_kind()
              else "AMD EPYC, family 26 model 2, bf16")
    done = arms(runs, "start", "P", "abc")
    assert done.returncode == 1 and "trajectories would differ" in done.stderr
    assert not (runs / "paper-rules-abc/snakemake.log").exists()


def test_a_running_tree_is_not_started_twice(tmp_path):
    runs = tmp_path / "runs"
    tree = fake_tree(runs, "paper-rules-abc", cpu_kind())
    try:
        assert arms(runs, "start", "P", "abc", CORES="3").returncode == 0
        assert "--cores 3" in wait_for(tree / "snakemake.log")
        again = arms(runs, "start", "P", "abc")
        assert again.returncode == 1 and "runs already" in again.stderr
        assert (tree / "snakemake.log").read_text().count("ARGS:") == 1
    finally:
        arms(runs, "stop")

"""What a user does with a finished smoke tree (tests/conftest.py's smoke_tree, built by tests/test_smoke_dag.py's
worker): README's and docs/LIBRARY.md's Python blocks and commands run as written in it, and an experiment in a
directory of its own that trains below its models. These only read the tree; they run last, so that under xdist
another worker can take them while the tree's own tests run (tests/conftest.py).
"""

import json
import re
import subprocess
import sys

import pandas as pd
from test_workflow import ROOT, SEEDS, snakemake


def readme_blocks(lang: str) -> list[str]:
    """The `lang` code blocks of README.md and docs/LIBRARY.md (the library's examples, moved out of README)."""
    pages = [ROOT / "README.md", ROOT / "docs/LIBRARY.md"]
    return [b for page in pages for b in re.findall(rf"```{lang}\n(.*?)```", page.read_text(), flags=re.S)]


def test_readme_python_blocks_run_as_written_in_the_smoke_tree(smoke_tree, tmp_path):
    assert len(readme_blocks("python")) >= 2
    for block in readme_blocks("python"):
        proc = subprocess.run([sys.executable, "-c", block], cwd=smoke_tree, capture_output=True, text=True)
        assert proc.returncode == 0, f"{block}\n{proc.stderr[-3000:]}"


def test_readme_commands_run_as_written_in_the_smoke_tree(smoke_tree):
    """Every command of README's bash blocks: python ones as written, snakemake ones as dry runs (-n; the
    paper's DAG takes GPU-days). ./run.sh lines are the install and this suite, so they are not run here."""
    lines = [line.split("  #")[0].strip() for block in readme_blocks("bash") for line in block.splitlines()]
    commands = [line for line in lines if line and not line.startswith("./run.sh")]
    assert any(c.startswith("snakemake") for c in commands) and any(c.startswith("python") for c in commands)
    for command in commands:
        argv = command.split()
        if argv[0] == "snakemake":
            proc = snakemake(smoke_tree, *argv[1:], "-n", check=False, cores=None)
        elif argv[0] == "python":
            proc = subprocess.run([sys.executable, *argv[1:]], cwd=smoke_tree, capture_output=True, text=True)
        else:
            raise AssertionError(f"README command {command!r}: teach this test to run it")
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


def test_an_experiment_in_a_directory_of_its_own_trains_below_the_parents_it_copies_from_another_tree(smoke_tree,
                                                                                                      tmp_path):
    """`--directory` and `reuse`: text_s4 at another lr from the smoke tree's text_s3 weights, the smoke tree
    untouched, and the many-seed table of the experiment."""
    exp, overlay = tmp_path / "exp", tmp_path / "exp.yaml"
    overlay.write_text(f"reuse: {{tree: {smoke_tree / 'results'}, stages: [text_s1, text_s2, text_s3]}}\n"
                       "stages: {text_s4: {train: {lr: 0.002}}}\n")
    before = {p: p.stat().st_mtime_ns for p in (smoke_tree / "results/models").rglob("*") if p.is_file()}
    out = snakemake(smoke_tree, "-d", str(exp), "results/tables/seeds/text_s4.csv", "--configfile", "config/smoke.yaml",
                    str(overlay)).stdout
    assert {p: p.stat().st_mtime_ns for p in before} == before
    for seed in SEEDS:
        copied, theirs = (d / f"results/models/seed{seed}/text_s3/model.safetensors" for d in (exp, smoke_tree))
        assert copied.read_bytes() == theirs.read_bytes()
        meta = json.loads((exp / f"results/models/seed{seed}/text_s4/meta.json").read_text())
        assert meta["train_config"]["lr"] == 0.002
    assert not (exp / "results/models/seed0/text_s2/train.log").exists(), out  # copied, never trained here
    table = pd.read_csv(exp / "results/tables/seeds/text_s4.csv")
    assert list(table["unit"][:3]) == ["text_s1", "text_s2", "text_s3"] and set(table["runs"]) == {len(SEEDS)}
    assert table["unit"].iloc[-1] == "text_s4" and (exp / "results/figures/seeds/text_s4.pdf").stat().st_size > 0

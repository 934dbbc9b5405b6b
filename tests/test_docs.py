"""The documentation quotes what was measured: README's results against the committed tables of the run they are
from, and every link between the pages resolves."""

import re
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
MINI = ROOT / "docs/results/mini"  # the run README's results are from (docs/results/mini/export.py)
LABELS = r"(Positional|Symbolic-A|Symbolic-B|none)"


def readme_results() -> tuple[str, list[list[str]]]:
    """README's "Results at a glance": the prompt order its OOD numbers are in (its sentence "OOD = mean accuracy
    over 9..32 objects, <order> order") and its table's rows."""
    section = (ROOT / "README.md").read_text().split("## Results at a glance")[1].split("\n## ")[0]
    order = re.search(r"OOD = mean accuracy over 9\.\.32 objects, (\w+) order", " ".join(section.split())).group(1)
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in section.splitlines() if line.startswith("| ")]
    return order, rows[1:]  # the header row aside


def test_readmes_results_table_quotes_the_committed_tables_of_its_run():
    """OOD per seed = mean accuracy over 9..32 objects in the order README names, recomputed from
    eval_by_length.csv; the mechanism counts = the circuit labels of circuits.csv."""
    order, rows = readme_results()
    evals = pd.read_csv(MINI / "eval_by_length.csv")
    assert order in set(evals["order"]), f"README names {order!r} order; the run evaluated {set(evals['order'])}"
    ood = evals[(evals["order"] == order) & ~evals["in_distribution"]].groupby(["variant", "run"])["accuracy"].mean()
    circuits = pd.read_csv(MINI / "circuits.csv", keep_default_na=False)
    assert len(rows) == evals["variant"].nunique()
    for variant, _, ood_cell, mechanism_cell in rows:
        variant = variant.split(" ")[0]
        quoted = [float(x) for x in re.findall(r"\d+\.\d", ood_cell)[:3]]
        # to one decimal; a mean at a .x5 boundary (24.25 = 97/4) may print either way
        assert quoted == pytest.approx([100 * a for a in ood[variant].sort_index()], abs=0.05 + 1e-9), variant
        counts = {label: int(n) for label, n in re.findall(LABELS + r",? (\d)", mechanism_cell)}
        assert counts == Counter(circuits.loc[circuits["variant"] == variant, "circuit"]), variant


def markdown_links(page: Path) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()) if "://" not in t]


PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_of_a_page_resolves(page):
    for target in markdown_links(page):
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links {target}, which does not exist"


def test_the_ledger_is_linked_from_readme_configs_and_the_gpu_page():
    for path in ("README.md", "config/config.yaml", "config/mini.yaml", "docs/GPU.md"):
        assert "docs/results/README.md" in (ROOT / path).read_text(), path


REPO_PATH = re.compile(r"(?<![\w:/.-])((?:config|docs|scripts|benchmarks|src|tests|profiles|workflow)/[\w./{}*-]*\w)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_file_a_page_names_exists(page):
    """A path into the repository (config/..., scripts/..., ...) names a file or folder of it; one that has left it
    is cited as `commit:path`, which this leaves alone."""
    missing = [p for p in REPO_PATH.findall(page.read_text()) if "{" not in p and "*" not in p
               and not (ROOT / p).exists()]
    assert not missing, f"{page.relative_to(ROOT)} names {sorted(set(missing))}"

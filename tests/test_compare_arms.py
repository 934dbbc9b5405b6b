"""docs/results/paper-rules/compare.py, issue 87's tables across arms: an arm that trained noise_text alone (arm E) is
compared against the base arm's text_only, one that trained text_long alone (arm C) against its noise_text, and the
differences it prints are the ones recomputed from the prompts' counts here."""

import subprocess
import sys
from pathlib import Path

import pandas as pd

COMPARE = Path(__file__).resolve().parents[1] / "docs/results/paper-rules/compare.py"


def export(folder: Path, correct: dict[tuple[str, int], list[int]]) -> Path:
    """An export whose eval_by_length.csv has, per (variant, seed), `correct` of 100 prompts at 2, 8 (inside) and 9,
    32 (outside the training range)."""
    rows = [{"variant": v, "run": f"seed{s}", "order": "shuffled", "n_objects": n, "correct": c, "n_prompts": 100,
             "accuracy": c / 100, "in_distribution": n <= 8, "seed": s, "diverged": False, "converged": True,
             "retries": 0} for (v, s), counts in correct.items() for n, c in zip((2, 8, 9, 32), counts)]
    folder.mkdir()
    pd.DataFrame(rows).to_csv(folder / "eval_by_length.csv", index=False)
    return folder


def test_an_arm_without_text_only_is_compared_against_the_base_arms(tmp_path):
    p = export(tmp_path / "P", {("text_only", 0): [100, 97, 30, 10], ("noise_text", 0): [100, 99, 50, 20],
                                ("text_only", 1): [100, 90, 20, 4], ("noise_text", 1): [100, 95, 10, 4]})
    e = export(tmp_path / "E", {("noise_text", 0): [100, 80, 70, 30], ("noise_text", 1): [100, 60, 10, 2]})
    c = export(tmp_path / "C", {("text_long", 0): [100, 99, 40, 16]})
    def table(*base: str) -> str:
        return subprocess.run([sys.executable, str(COMPARE), f"P={p}", f"E={e}", f"C={c}", *base], capture_output=True,
                              text=True, check=True).stdout

    row = next(line for line in table().splitlines() if line.startswith("| noise_text - text_only |"))
    assert row.split("|")[3].strip() == "—"  # no base named: E is compared against nothing
    out = table("--base", "P")
    row = next(line for line in out.splitlines() if line.startswith("| noise_text - text_only |"))
    _, _, arm_p, arm_e, arm_c, _, _ = (c.strip() for c in row.split("|"))
    assert arm_c == "—"  # C has neither: P's own difference, not C's
    # OOD = the mean over 9 and 32 of correct / 100, in points
    assert arm_p == f"{(50 + 20) / 2 - (30 + 10) / 2:.1f} / {(10 + 4) / 2 - (20 + 4) / 2:.1f} (1 of 2)"
    assert arm_e == f"{(70 + 30) / 2 - (30 + 10) / 2:.1f} / {(10 + 2) / 2 - (20 + 4) / 2:.1f} (1 of 2, b: P's)"
    row = next(line for line in out.splitlines() if line.startswith("| noise_text - text_long |"))
    assert row.split("|")[4].strip() == f"{(50 + 20) / 2 - (40 + 16) / 2:.1f} / — (1 of 1, a: P's)"
    at8 = next(line for line in out.splitlines() if line.startswith("| noise_text |"))
    assert "80.0 / 60.0" in at8  # E's own accuracy at 8 objects, not P's

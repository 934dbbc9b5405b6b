"""`python -m vlbind sample`: the paper's text format, one prompt and its answer per line."""

import subprocess
import sys
from pathlib import Path

import pytest
from test_tasks import solve

ROOT = Path(__file__).resolve().parents[1]


def sample(*args):
    proc = subprocess.run([sys.executable, "-m", "vlbind", "sample", *args], cwd=ROOT, capture_output=True, text=True)
    return proc


@pytest.mark.parametrize("args", [
    ["--stage", "text_s4", "--count", "20", "--seed", "0"],
    ["--stage", "text_s1", "--count", "20", "--kind", "grounding"],
    ["--stage", "text_s5", "--count", "20", "--query-by", "shape"],
    ["--stage", "noise_text", "--count", "5", "--noise"],
])
def test_each_line_is_a_prompt_and_its_recomputable_answer(args):
    proc = sample(*args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == int(args[args.index("--count") + 1])
    for line in lines:
        prompt, answer = line.split("\t")
        assert prompt.endswith("[ANSWER]") and solve(prompt) == answer
        assert ("[NOISE]" in prompt) == ("--noise" in args)


def test_stage_layout_shows_in_the_text():
    (line,) = sample("--stage", "text_s1", "--count", "1").stdout.splitlines()
    toks = line.split("\t")[0].split()
    assert len(toks) == 13 and toks[4] == "[CONTEXTEND]"
    assert toks[5] == toks[1] and toks[8] == toks[3]  # fixed order: associations follow the context


def test_same_seed_same_prompts_and_unknown_stage_is_named():
    assert sample("--stage", "text_s3", "--seed", "4").stdout == sample("--stage", "text_s3", "--seed", "4").stdout
    proc = sample("--stage", "text_s9")
    assert proc.returncode == 2 and "text_s9" in proc.stderr and "text_s1" in proc.stderr


def test_image_stage_prints_its_text_form_without_a_bank_and_images_with_one(tmp_path):
    proc = sample("--stage", "image", "--count", "5")
    assert proc.returncode == 0 and "text form" in proc.stderr and len(proc.stdout.splitlines()) == 5
    assert all(solve(line.split("\t")[0]) == line.split("\t")[1] for line in proc.stdout.splitlines())

    from vlbind.data.render import RenderConfig, render_bank
    from vlbind.vision.encoders import EncoderSpec, extract
    render_bank(RenderConfig(size=64, renderings=1), tmp_path / "bank")
    spec = EncoderSpec("vit_tiny_patch16_224", pretrained=False, grid=2, model_kwargs={"img_size": 64})
    extract(spec, tmp_path / "bank" / "images", 104, tmp_path / "f.npy", batch_size=32)
    proc = sample("--stage", "image", "--count", "5", "--kind", "retrieval", "--bank", str(tmp_path / "bank"),
                  "--features", str(tmp_path / "f.npy"))
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 5
    for line in proc.stdout.splitlines():
        prompt = line.split("\t")[0]
        n_images = prompt.count("<image ")
        assert n_images >= 2 and prompt.count("[SEP]") == n_images - 1 and ": 4 tokens>" in prompt
    proc = sample("--stage", "image", "--bank", str(tmp_path / "bank"), "--features", str(tmp_path / "missing.npy"))
    assert proc.returncode == 2 and "missing.npy" in proc.stderr


def test_counterfactual_pairs_print_both_prompts_and_five_distinct_predictions():
    proc = sample("--stage", "text_s5", "--counterfactual", "--count", "20", "--seed", "3")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 20
    for line in proc.stdout.splitlines():
        original, counterfactual, *predicted = line.split("\t")
        assert len(predicted) == 5 and len(set(predicted)) == 5
        assert solve(counterfactual) == predicted[3]  # the counterfactual's answer is the reflexive item
        assert solve(original) == predicted[4]  # no effect: the original answer
        assert len(original.split()) == len(counterfactual.split()) and original.count("[SEP]") >= 4
    proc = sample("--stage", "text_s1", "--counterfactual")
    assert proc.returncode == 2 and "5" in proc.stderr


def test_a_training_history_log_keeps_the_lines_of_a_killed_attempt(tmp_path):
    """A killed training job resumes when run again; Snakemake deletes its rule log first, the history log
    beside the resume state keeps every attempt."""
    import logging

    from vlbind.core.logs import setup_logging

    rule_log, history = tmp_path / "logs" / "job.log", tmp_path / "models" / "train.log"
    try:
        setup_logging(str(rule_log), history=history).info("first attempt: step 1000")
        rule_log.unlink()  # what Snakemake does before running the job again
        setup_logging(str(rule_log), history=history).info("second attempt: resumed from step 1000")
    finally:
        logging.basicConfig(handlers=[logging.StreamHandler()], force=True)
        sys.excepthook = sys.__excepthook__
    messages = [line.split(": ", 1)[1] for line in history.read_text().splitlines()]  # after "time level name: "
    assert len(messages) == 4 and all(m.startswith("job started") for m in messages[0::2])
    assert messages[1::2] == ["first attempt: step 1000", "second attempt: resumed from step 1000"]
    assert rule_log.read_text().splitlines()[-1].endswith("second attempt: resumed from step 1000")


def test_check_config_names_the_file_and_line_of_a_yaml_error_and_passes_a_good_overlay(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seeds: [0, 1]\nmodel: {d_model: 64\n  n_heads: [\n")
    run = [sys.executable, "-m", "vlbind", "check-config", "config/config.yaml"]
    proc = subprocess.run([*run, str(bad)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and str(bad) in proc.stderr and "line 2" in proc.stderr
    proc = subprocess.run([*run, "config/mini.yaml"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_the_default_config_is_the_repositorys_from_any_directory(tmp_path):
    """Without --config, sample reads config/config.yaml (shipped with the package) wherever it runs."""
    args = ["-m", "vlbind", "sample", "--stage", "text_s4", "--count", "3", "--seed", "1"]
    elsewhere = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True)
    named = subprocess.run([sys.executable, *args, "--config", "config/config.yaml"], cwd=ROOT, capture_output=True,
                           text=True)
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert elsewhere.stdout == named.stdout and elsewhere.stdout.count("\n") == 3

"""The Snakemake DAG: dry runs of the paper config and the SLURM profile, config validation, lint, and the helpers
the smoke DAG's tests share (conftest.py's `smoke_tree` fixture builds that tree; tests/test_smoke_dag.py and
tests/test_smoke_tree_use.py read it).

These run Snakemake as a user would, in a copy of the workflow in a temporary directory.
"""

import multiprocessing
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from vlbind import captions as vlcaptions
from vlbind import config as vlconfig
from vlbind import params as vlparams
from vlbind.core import schema as vlschema
from vlbind.core import stages as vlstages

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
SEEDS = (0, 1)
PAPER_TEXT_STAGES = ["text_s1", "text_s2", "text_s3", "text_s4", "text_s5", "noise_text", "grounding"]
CURRICULUM_STAGES = ["curriculum_image", "curriculum_mixed", "curriculum_text", "noise_curriculum_text"]  # as mini
CONTROL_STAGES = ["text_bind", "noise_text_bind", "text_bind_shuffled"]  # set in smoke.yaml, not in its variants
TEXT_STAGES = PAPER_TEXT_STAGES + CURRICULUM_STAGES
VISION_STAGES = ["image", "mixed", "image_text", "noise_image_text"]
IMAGE_VARIANTS = ["image_text", "noise_image_text"]
CURRICULUM_VARIANTS = ["curriculum_text", "noise_curriculum_text"]
VARIANTS = ["text_only", "noise_text", *IMAGE_VARIANTS, *CURRICULUM_VARIANTS]  # config/smoke.yaml, as mini
ANALYSED = VARIANTS  # smoke's interp.variants
ENCODERS = ("vit_tiny", "cnn_tiny")  # config/smoke.yaml: random weights, and pretrained by the DAG
ENCODER = ENCODERS[0]
ANALYSES = ["interchange", "knockout", "probes", "layer_relevance"]
INTERP_FIGURES = ["fig4", "fig9", "fig10", "fig11", "fig12", "fig13", "fig_layer_relevance"]
# Snakemake's command line in a process of its own, forked from a server that imported it once: `python -m snakemake`
# as a user runs it, without paying its ~1-2 s of imports per call (the suite makes ~40 calls)
CLI = multiprocessing.get_context("forkserver")
CLI.set_forkserver_preload(["snakemake.cli", __name__])  # this module too: the child runs its _snakemake_cli


def _snakemake_cli(argv: list[str], workdir: str, out: str, err: str) -> None:
    """In the forked process: `snakemake ARGV` in `workdir`, its stdout and stderr into the files `out` and `err`;
    snakemake's exit status is the process's."""
    os.chdir(workdir)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(f, fd)
        os.close(f)
    sys.argv = ["snakemake", *argv]
    from snakemake.cli import main

    main(argv)


def snakemake(workdir, *args, check=True, cores="2") -> subprocess.CompletedProcess:
    """`snakemake --cores CORES ARGS` run in `workdir` as a user runs it; its exit status, stdout and stderr."""
    argv = [*(["--cores", cores] if cores else []), *args]  # cores None: what the profile says
    with tempfile.TemporaryDirectory() as tmp:
        out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
        process = CLI.Process(target=_snakemake_cli, args=(argv, str(workdir), str(out), str(err)))
        process.start()
        process.join()
        proc = subprocess.CompletedProcess([*SNAKEMAKE, *argv], process.exitcode, out.read_text(), err.read_text())
    if check and proc.returncode:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    return proc


def copy_workflow(dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "workflow", "config", "scripts", "profiles", "src"):
        src = ROOT / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name)
    return dest


def scheduled(dry_run_output: str) -> set[tuple[str, str]]:
    """(rule, wildcards) of every job a dry run lists."""
    jobs = set()
    for block in re.split(r"\n(?=(?:localrule|rule) )", dry_run_output):
        m = re.match(r"(?:localrule|rule) (\w+):", block)
        if m:
            w = re.search(r"wildcards: (.*)", block)
            jobs.add((m.group(1), w.group(1).strip() if w else ""))
    return jobs


MALFORMED = [  # (overlay on config.yaml + smoke.yaml, the key its error must name)
    # relations between keys the schema cannot express
    ("model: {d_model: 30}", "model.d_model"),  # 2 heads of 15: odd, RoPE needs pairs
    ("model: {d_model: 32, n_heads: 3}", "model.d_model"),
    ("model: {max_positions: 100}", "model.max_positions"),  # evaluation at 12 objects needs 62
    ("model: {max_positions: 600}\nstages: {noise_text: {task: {noise_tokens: 100}}}", "model.max_positions"),
    ("stages: {text_bind: {train: {binding_loss: 0.5}}}", "stages.text_bind.train.binding_loss"),  # not the images'
    ("stages: {noise_text_bind: {task: {n_items: 8}}}", "stages.noise_text_bind.task"),  # the parent's, set there
    ("stages: {curriculum_image: {train: {lr: 0.1}}}", "stages.curriculum_image"),  # the image stage's, set there
    ("render: {min_scale: 0.7, max_scale: 0.5}", "render.min_scale"),
    ("render: {layout: canvas, min_objects: 6, max_objects: 3}", "render.min_objects"),
    ("render: {layout: canvas, max_objects: 13}", "render"),  # objects on a canvas need distinct colors (8)
    ("evaluate: {train_max_objects: 20}", "evaluate.train_max_objects"),
    ("evaluate: {min_objects: 9, max_objects: 4}", "evaluate.min_objects"),
    ("seeds: [0, 1, 0]", "seeds"),
    ("stages: {image: {task: {n_colors: 12}}}", "stages.image.task.n_colors"),  # the bank renders 8
    ("stages: {mixed: {task: {n_shapes: 20}}}", "stages.mixed.task.n_shapes"),  # 13 shapes exist
    ("stages: {image: {start: {steps: 5, task: {n_colors: 9}}}}", "stages.image.start.task.n_colors"),
    ("stages: {text_s3: {task: {min_objects: 9, max_objects: 8}}}", "stages.text_s3.task"),
    ("stages: {text_s1: {task: {n_colors: 1}}}", "stages.text_s1.task"),  # fewer colors than objects
    ("stages: {text_s2: {task: {image_fraction: 0.5}}}", "stages.text_s2.task.image_fraction"),
    ("vision: {encoders: [resnet_999]}", "vision.encoders"),
    ("encoders: {cnn_tiny: {checkpoint: w.safetensors}}", "encoders.cnn_tiny"),
    ("encoders: {cnn_tiny: {pretrain: {min_scale: 0.9, max_scale: 0.2}}}", "encoders.cnn_tiny.pretrain.min_scale"),
    # unknown keys, at every depth
    ("seedz: [1]", "seedz"),
    ("model: {n_layer: 2}", "n_layer"),
    ("stages: {text_s1: {task: {n_colour: 8}}}", "n_colour"),
    ("stages: {text_s6: {task: {n_colors: 8}}}", "text_s6"),
    ("stages: {text_s1: {trian: {lr: 0.1}}}", "trian"),
    ("precision: {tpu: bf16}", "tpu"),
    ("encoders: {cnn_tiny: {pretrain: {epoch: 2}}}", "epoch"),
    ("interp: {probes: {rigde: 1.0}}", "rigde"),
    ("qwen: {models: {qwen2: {revision: main}}}", "revision"),
    ("resources: {train_gpu: 1}", "train_gpu"),
    # renamed keys name their new key
    ("resources: {train_threads: 2}", "resources.threads"),
    ("train: {precision: {cpu: fp32}}", "precision"),
    ("stages: {image: {train: {precision: {cpu: fp32}}}}", "precision"),
    ("qwen: {generation: {thinking: true}}", "qwen.chat.thinking"),
    ("stages: {text_s3: {task: {max_pairs: 4}}}", "stages.text_s3.task.max_objects"),
    ("stages: {image: {start: {task: {min_pairs: 2}}}}", "stages.image.start.task.min_objects"),
    ("render: {variants: 4}", "render.renderings"),
    ("encoders: {cnn_tiny: {pretrain: {variants: 8}}}", "encoders.cnn_tiny.pretrain.renderings"),
    # wrong types and values
    ("train: {lr: fast}", "train.lr"),
    ("stages: {text_s4: {train: {queries: some}}}", "stages.text_s4.train.queries"),
    ("device: tpu", "device"),
    ("render: {layout: mosaic}", "render.layout"),
    ("stages: {text_s4: {task: {shuffle: maybe}}}", "stages.text_s4.task.shuffle"),
    ("seeds: 3", "seeds"),
    ("model: {n_heads: 2.5}", "model.n_heads"),
    ("qwen: {dtype: int8}", "qwen.dtype"),
    ("encoders: {bad-name: {timm_name: resnet18}}", "encoders"),
    # zero and negative numbers
    ("model: {n_layers: 0}", "model.n_layers"),
    ("train: {batch_size: 0}", "train.batch_size"),
    ("train: {lr: -0.001}", "train.lr"),
    ("train: {warmup_steps: -1}", "train.warmup_steps"),
    ("stages: {noise_text: {task: {noise_tokens: -5}}}", "stages.noise_text.task.noise_tokens"),
    ("stages: {grounding: {task: {grounding_fraction: 1.5}}}", "stages.grounding.task.grounding_fraction"),
    ("evaluate: {prompts_per_length: 0}", "evaluate.prompts_per_length"),
    ("encoders: {cnn_tiny: {pretrain: {epochs: 0}}}", "encoders.cnn_tiny.pretrain.epochs"),
    ("interp: {interchange: {pairs: 0}}", "interp.interchange.pairs"),
    ("render: {size: 0}", "render.size"),
    ("seeds: [-1]", "seeds.0"),
    # empty lists and sections
    ("seeds: []", "seeds"),
    ("variants: []", "variants"),
    ("vision: {encoders: []}", "vision.encoders"),
    ("interp: {variants: []}", "interp.variants"),
    ("qwen: {prompts: {context_lengths: []}}", "qwen.prompts.context_lengths"),
]


@pytest.fixture(scope="module")
def workflow_copy(tmp_path_factory):
    return copy_workflow(tmp_path_factory.mktemp("wf"))


def names_the_key(message: str, key: str) -> bool:
    return f"invalid config at '{key}" in message or f"'{key}'" in message


@pytest.mark.parametrize("overlay, key", MALFORMED, ids=[k for _, k in MALFORMED])
def test_malformed_config_is_refused_naming_the_key(overlay, key):
    """What the DAG build does with `--configfile config/smoke.yaml bad.yaml`, in this process: Snakemake's own
    merge of the config files (snakemake.utils.update_config, as for every --configfile), then the validation
    common.smk runs. The test below runs one case of each kind through Snakemake itself."""
    from snakemake.utils import update_config

    merged: dict = {}
    for text in [(ROOT / "config/config.yaml").read_text(), (ROOT / "config/smoke.yaml").read_text(), overlay]:
        update_config(merged, yaml.safe_load(text))
    with pytest.raises(vlconfig.ConfigError) as refused:
        vlconfig.validate(merged)
    assert names_the_key(str(refused.value), key), str(refused.value)


# One case of each kind above (a relation, a stage's task, unknown, renamed, type, zero, empty) through Snakemake:
# the refusal reaches the user at DAG build, before any job.
AT_DAG_BUILD = ["model.d_model", "stages.text_s3.task", "seedz", "resources.threads", "train.lr", "train.batch_size",
                "variants"]


@pytest.mark.parametrize("key, overlay", [(k, next(o for o, key in MALFORMED if key == k)) for k in AT_DAG_BUILD],
                         ids=AT_DAG_BUILD)
def test_malformed_config_fails_at_dag_build_naming_the_key(workflow_copy, tmp_path, key, overlay):
    (tmp_path / "bad.yaml").write_text(overlay + "\n")
    proc = snakemake(workflow_copy, "-n", "--configfile", "config/smoke.yaml", str(tmp_path / "bad.yaml"), check=False)
    assert proc.returncode != 0
    assert names_the_key(proc.stdout + proc.stderr, key)
    assert not (workflow_copy / "results").exists()


def test_lint_is_clean():
    proc = snakemake(ROOT, "--lint", "--configfile", "config/smoke.yaml", check=False)
    assert proc.returncode == 0 and "good condition" in proc.stdout + proc.stderr, proc.stdout + proc.stderr


def test_code_is_formatted_and_lint_free():
    ruff = subprocess.run([sys.executable, "-m", "ruff", "check", "src", "scripts", "tests", "benchmarks"],
                          cwd=ROOT, capture_output=True, text=True)
    assert ruff.returncode == 0, ruff.stdout
    fmt = subprocess.run([sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow/rules"],
                         cwd=ROOT, capture_output=True, text=True)
    assert fmt.returncode == 0, fmt.stdout + fmt.stderr


def test_dag_building_and_figures_import_no_torch_and_no_consumer_imports_training():
    code = ("import sys, vlbind.config, vlbind.captions; assert 'matplotlib' not in sys.modules, 'matplotlib'; "
            "import vlbind.figures, vlbind.qwen.figures, vlbind.evaluation.outcomes, vlbind.evaluation.tables; "
            "import vlbind.interp; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    consumers = [ROOT / "src/vlbind/evaluation/evaluate.py", *(ROOT / "src/vlbind/interp").glob("*.py")]
    assert not [p.name for p in consumers if re.search(r"from \.+train import", p.read_text())]


def test_slurm_profile_gives_training_and_evaluation_a_gpu_and_its_threads(workflow_copy):
    work = workflow_copy
    out = snakemake(work, "--workflow-profile", "profiles/slurm", "-n", "--configfile", "config/smoke.yaml",
                    cores=None).stdout
    blocks = re.split(r"\n(?=(?:localrule|rule) )", out)
    threads = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())["set-threads"]
    for rule in ("train_text", "train_vision", "extract_features", "evaluate", "analyze"):
        mine = [b for b in blocks if b.startswith(f"rule {rule}:")]
        assert mine and all(re.search(r"resources:.*\bgpu=1\b", b) for b in mine)
        assert threads[rule] > 2 and all(f"threads: {threads[rule]}\n" in b for b in mine), rule
    cpu_only = ("rule accuracy_figures:", "rule all:", "rule render_bank:")
    assert not any(re.search(r"\bgpu=", b) for b in blocks if b.startswith(cpu_only))
    default = yaml.safe_load((ROOT / "profiles/default/config.yaml").read_text())
    slurm = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text())
    assert slurm["rerun-triggers"] == default["rerun-triggers"]


def test_paper_config_dry_run_lists_every_stage_for_4_seeds_and_3_encoders(workflow_copy):
    work = workflow_copy
    out = snakemake(work, "-n", "--cores", "8", "results/figures/fig3.pdf").stdout
    counts = {rule: len([j for j in scheduled(out) if j[0] == rule]) for rule in
              ("render_bank", "extract_features", "train_text", "train_vision", "evaluate")}
    assert counts == {"render_bank": 1, "extract_features": 3, "train_text": 4 * len(PAPER_TEXT_STAGES),
                      "train_vision": 4 * 3 * len(VISION_STAGES), "evaluate": 4 * 2 + 4 * 3 * 2}


@pytest.mark.parametrize("overlays", [[], ["config/mini.yaml"], ["config/smoke.yaml"]])
def test_validation_reads_a_config_and_never_changes_it(overlays):
    """Derived sections (the controls' tasks, the curriculum control's stages) are read through
    params.stage_section, never written into the config."""
    import copy

    raw = {}
    for path in ["config/config.yaml", *overlays]:
        raw = vlparams.deep_merge(raw, yaml.safe_load((ROOT / path).read_text()))
    before = copy.deepcopy(raw)
    assert vlconfig.validate(raw) == before and raw == before


def test_rule_params_do_not_depend_on_the_order_keys_were_merged_in():
    """Snakemake compares params as written: the same settings in another key order must not rerun a job."""

    def reverse(d):
        return {k: reverse(d[k]) for k in reversed(list(d))} if isinstance(d, dict) else d

    config = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/smoke.yaml"])
    flipped = reverse(config)
    for stage, encoder in (("text_s1", None), ("image", ENCODER)):
        a = yaml.safe_dump(vlparams.stage_params(config, stage, encoder), sort_keys=False)
        b = yaml.safe_dump(vlparams.stage_params(flipped, stage, encoder), sort_keys=False)
        assert a == b


def test_settings_at_their_schema_default_are_left_out_of_stage_params():
    """A setting added to vlbind with a default that keeps the old behaviour must not rerun finished stages:
    a config written before it existed gives the same params. Dropping is lossless because each schema
    default is what the library does when the key is absent (the dataclass default: test_defaults)."""
    config = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    defaults = vlschema.schema_defaults("train")
    assert defaults
    written = {**config, "train": {**defaults, **config["train"]}}  # each optional setting written at its default
    for stage in vlstages.TEXT_STAGES:
        assert vlparams.stage_params(written, stage) == vlparams.stage_params(config, stage), stage
    # a setting moved off its default is a change
    changed = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    changed["stages"]["text_s5"]["train"]["queries"] = {"one": "all", "all": "one"}[
        vlparams.stage_train(config, "text_s5").get("queries", defaults["queries"])]
    assert vlparams.stage_params(changed, "text_s5") != vlparams.stage_params(config, "text_s5")


def test_bf16_on_a_cpu_without_bf16_instructions_warns_with_the_key_and_auto_picks_fp32(monkeypatch):
    import warnings

    from vlbind.core import device

    precision = {"cuda": "bf16", "cpu": "bf16"}
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
    with pytest.warns(UserWarning, match=r"set precision\.cpu"):
        assert device.precision_for(precision, "cpu") == "bf16"
    monkeypatch.setattr(device, "cpu_has_bf16", lambda: True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert device.precision_for(precision, "cpu") == "bf16"
        assert device.precision_for(precision, "cuda:1") == "bf16"
        assert device.precision_for({"cuda": "bf16"}, "cpu") == "fp32"
        auto = {"cuda": "auto", "cpu": "auto"}
        assert device.precision_for(auto, "cpu") == "bf16"
        monkeypatch.setattr(device, "cpu_has_bf16", lambda: False)
        assert device.precision_for(auto, "cpu") == "fp32"  # no warning: auto chose for this CPU
        monkeypatch.setattr(device, "cuda_has_bf16", lambda: True)
        assert device.precision_for(auto, "cuda:0") == "bf16"
        monkeypatch.setattr(device, "cuda_has_bf16", lambda: False)
        assert device.precision_for(auto, "cuda:0") == "fp32"


def test_qwen_all_on_the_paper_config_lists_six_models_with_a_gpu_each(workflow_copy):
    work = workflow_copy
    out = snakemake(work, "-n", "qwen_all").stdout
    blocks = [b for b in re.split(r"\n(?=(?:localrule|rule) )", out) if b.startswith("rule qwen_retrieval:")]
    assert len(blocks) == 6 and all(re.search(r"resources:.*\bgpu=1\b", b) for b in blocks)
    analyses = [b for b in re.split(r"\n(?=(?:localrule|rule) )", out) if b.startswith("rule qwen_analyze:")]
    assert len(analyses) == 6 and all(re.search(r"resources:.*\bgpu=1\b", b) for b in analyses)
    assert "qwen_retrieval" not in snakemake(work, "-n").stdout  # not part of `all`: it needs the weights


@pytest.mark.parametrize(("machine_cores", "args", "cores"), [(7, [], 7), (16, ["-n"], 16), (7, ["--cores", "3"], 3)])
def test_run_sh_mini_runs_one_job_per_core_of_the_machine_unless_told(tmp_path, machine_cores, args, cores):
    """./run.sh mini gives snakemake the machine's core count (nproc, shimmed here), and a user's --cores wins:
    the arguments run.sh passes are read back with snakemake's own parser."""
    from snakemake.cli import get_argument_parser

    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / "run.sh", tmp_path)
    (tmp_path / "pyproject.toml").touch()
    os.utime(tmp_path / "pyproject.toml", (0, 0))  # older than the stamp below
    venv = tmp_path / ".venv/bin"
    venv.mkdir(parents=True)
    (tmp_path / ".venv/.vlbind-installed").touch()  # installed: run.sh goes straight to the command
    for name, body in ((tmp_path / "bin/nproc", f"echo {machine_cores}"), (venv / "snakemake", 'printf "%s\\n" "$@"')):
        name.write_text(f"#!/usr/bin/env bash\n{body}\n")
        name.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    proc = subprocess.run(["bash", "run.sh", "mini", *args], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    parsed = get_argument_parser().parse_args(proc.stdout.splitlines())
    assert (parsed.cores, parsed.configfile) == (cores, [Path("config/mini.yaml")])
    assert parsed.dryrun == ("-n" in args)


def test_mini_trains_the_papers_shuffled_text_arm_and_the_fixed_order_overlay_switches_only_that():
    """mini trains text_s4 (the paper config's ramp, practice prompts and batch; lr 1e-3, measured on this CPU),
    text_s5 and noise_text on shuffled lists as the paper config does, evaluates shuffled prompts first and
    analyses them. config/fixed_text.yaml on top of either skips text_s4, keeps text_s5 and noise_text in
    context order, evaluates fixed-order prompts first and analyses those; every other stage keeps its settings."""
    paper = vlconfig.load([ROOT / "config/config.yaml"])
    mini = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    stages = ("text_s4", "text_s5", "noise_text", *vlstages.VISION_STAGES)
    for cfg in (paper, mini):
        assert all(vlparams.stage_section(cfg, s)["task"]["shuffle"] for s in stages)
        assert (cfg["evaluate"]["orders"][0], cfg["interp"]["order"]) == ("shuffled", "shuffled")
    s4, paper_s4 = (vlparams.stage_params(c, "text_s4") for c in (mini, paper))
    assert s4["train"]["max_steps"] > 0 and s4["train"]["ramp"] and s4["task"]["solo_fraction"] > 0
    assert s4["train"]["batch_size"] == paper_s4["train"]["batch_size"]
    assert (s4["train"]["lr"], paper_s4["train"]["lr"]) == (1.0e-3, 3.0e-4)
    assert mini["evaluate"]["orders"] == ["shuffled", "fixed"]
    for base, encoder_of in ((paper, "resnet152"), (mini, "render_cnn")):
        names = ["config/config.yaml", *(["config/mini.yaml"] if base is mini else []), "config/fixed_text.yaml"]
        fixed = vlconfig.load([ROOT / n for n in names])
        assert {s: vlparams.stage_section(fixed, s)["task"]["shuffle"] for s in stages} == {
            "text_s4": True, "text_s5": False, "noise_text": False, **dict.fromkeys(vlstages.VISION_STAGES, True)}
        assert vlparams.stage_params(fixed, "text_s4")["train"]["max_steps"] == 0
        assert (fixed["evaluate"]["orders"], fixed["interp"]["order"]) == (["fixed", "shuffled"], "fixed")
        for s in vlstages.STAGE_PARENTS:
            encoder = encoder_of if vlparams.uses_images(base, s) else None
            if s not in ("text_s4", "text_s5", "noise_text", "text_bind", "noise_text_bind", "text_long"):  # controls
                assert vlparams.stage_params(fixed, s, encoder) == vlparams.stage_params(base, s, encoder), s


def test_the_noise_control_is_noise_text_without_its_noise_and_refuses_a_section_of_its_own():
    mini = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    long, s5, noise = (vlparams.stage_params(mini, s) for s in ("text_long", "text_s5", "noise_text"))
    assert (long["parent"], long["as_long_as"]) == ("text_s5", "noise_text")
    assert long["task"] == s5["task"] != noise["task"]  # the noise is the one difference in the task ...
    assert long["train"] == noise["train"]  # ... and its settings are noise_text's (steps and lr: at run time)
    note = vlcaptions.training_note(mini, ["text_long"])
    assert "as many steps as noise_text, without its noise" in note
    with pytest.raises(vlconfig.ConfigError, match=r"stages\.text_long"):
        vlconfig.validate({**mini, "stages": {**mini["stages"], "text_long": {"train": {"max_steps": 5}}}})


def test_the_control_arm_is_its_text_parent_plus_the_image_arms_binding_loss_and_figures_say_so():
    mini = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    params = {s: vlparams.stage_params(mini, s) for s in ("text_s5", "noise_text", "image_text", *CONTROL_STAGES)}
    assert params["text_bind"]["task"] == params["text_s5"]["task"] and params["text_bind"]["task"]["shuffle"]
    assert params["noise_text_bind"]["task"] == params["noise_text"]["task"]
    assert params["text_bind_shuffled"]["task"] == {**params["text_s5"]["task"], "shuffle": True}
    for control in CONTROL_STAGES:
        assert params[control]["parent"] == {"noise_text_bind": "noise_text"}.get(control, "text_s5")
        assert params[control]["train"]["binding_loss"] == params["image_text"]["train"]["binding_loss"] > 0
        assert params[control]["train"]["keep"] == "last"
    assert "binding_loss" not in params["text_s5"]["train"]  # at its default, 0: the text arm has no binding loss
    note = vlcaptions.training_note(mini, [*mini["variants"], "text_bind"])
    assert "text_only, noise_text: shuffled lists, no binding loss" in note
    assert "image_text, noise_image_text: shuffled lists, binding loss 1 from image on" in note
    assert "text_bind: shuffled lists, binding loss 1 from text_bind on (1750 steps" in note
    fixed = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml", ROOT / "config/fixed_text.yaml"])
    note = vlcaptions.training_note(fixed, [*fixed["variants"], "text_bind"])
    assert "text_only, noise_text: fixed-order lists (text_s4 skipped), no binding loss" in note
    assert "image_text, noise_image_text: shuffled lists (text_s4 skipped), binding loss 1 from image on" in note
    assert "text_bind: fixed-order lists (text_s4 skipped), binding loss 1 from text_bind on (1750 steps" in note
    paper = vlconfig.load([ROOT / "config/config.yaml"])
    assert vlcaptions.training_note(paper, paper["variants"]) == (
        "text_only, noise_text, image_text, noise_image_text: shuffled lists, no binding loss")


def test_an_overlay_switches_a_start_off_with_null(tmp_path):
    """mini's image stage starts on 2 objects; `start: null` in an overlay removes that start from the stage and from
    the curriculum control's copy of it (their params, so both rerun), and changes nothing else of either."""
    overlay = tmp_path / "nostart.yaml"
    overlay.write_text("stages: {image: {start: null}}\n")
    paths = [ROOT / "config/config.yaml", ROOT / "config/mini.yaml"]
    mini, off = vlconfig.load(paths), vlconfig.load([*paths, overlay])
    for stage in ("image", "curriculum_image"):
        on, without = (vlparams.stage_params(c, stage, "render_cnn") for c in (mini, off))
        assert on["start"]["task"]["max_objects"] == 2 and "start" not in without
        assert {k: v for k, v in on.items() if k != "start"} == without
    assert vlparams.stage_params(off, "image_text", "render_cnn")["start"]["steps"] == 1000  # other starts stay


def test_the_curriculum_control_is_the_image_arm_with_every_context_in_text():
    """Each curriculum stage is its image stage's section (task, start, train: caps, binding loss) with
    image_fraction 0, from the same parent (grounding), trained once per seed (no encoder, no projector)."""
    for overlays in (["config/config.yaml"], ["config/config.yaml", "config/mini.yaml"]):
        config = vlconfig.load([ROOT / p for p in overlays])
        encoder = config["vision"]["encoders"][0]
        for stage, image_stage in vlstages.CURRICULUM.items():
            ours, theirs = vlparams.stage_params(config, stage), vlparams.stage_params(config, image_stage, encoder)
            assert ours["task"] == {**theirs["task"], "image_fraction": 0.0}
            assert ours["train"] == theirs["train"]
            if "start" in theirs:
                assert ours["start"] == {**theirs["start"], "task": {**theirs["start"]["task"], "image_fraction": 0.0}}
            assert "start" in ours or "start" not in theirs
            assert not {"encoder", "projector"} & set(ours) and not vlparams.uses_images(config, stage)
            parent = vlstages.STAGE_PARENTS[image_stage]
            assert ours["parent"] == {v: k for k, v in vlstages.CURRICULUM.items()}.get(parent, parent)
            assert vlparams.run_name(0, stage, encoder) == "seed0"
    mini = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    assert vlparams.stage_params(mini, "curriculum_image")["start"]["task"]["max_objects"] == 2
    assert vlparams.stage_params(mini, "curriculum_text")["train"]["binding_loss"] == 1.0
    assert "curriculum_text, noise_curriculum_text: shuffled lists, binding loss 1 from " \
           "curriculum_image on" in vlcaptions.training_note(mini, mini["variants"])


def test_training_priority_is_the_longest_chain_below_a_stage():
    """Snakemake runs ready jobs by priority: the stage with the longest chain of stages after it first, so a run's
    critical path (its longest lineage) is never left for last."""

    leaves = [s for s in vlstages.STAGE_PARENTS if s not in vlstages.STAGE_PARENTS.values()]
    assert sorted(leaves) == ["noise_curriculum_text", "noise_image_text", "noise_text_bind", "text_bind",
                              "text_bind_shuffled", "text_long"]
    for stage in vlstages.STAGE_PARENTS:
        longest = max(len(vlstages.lineage(leaf)) - vlstages.lineage(leaf).index(stage)
                      for leaf in leaves if stage in vlstages.lineage(leaf))
        assert vlstages.chain_below(stage) == longest, stage
    assert vlstages.chain_below("text_s1") == len(vlstages.lineage("noise_image_text"))


def test_a_run_name_is_what_the_rules_write_and_parse_run_reads_it_back():
    """run_name fills the two run patterns train.smk writes a stage under (params.TEXT_RUN, VISION_RUN), parse_run
    reads one back, and the `run` wildcard of the read-out rules (common.smk) matches both."""
    constraint = re.search(r'run="([^"]+)"', (ROOT / "workflow/rules/common.smk").read_text()).group(1)
    for stage, encoder, name in (("text_s5", None, "seed3"), ("image", "vit_b16", "seed3-vit_b16")):
        assert vlparams.run_name(3, stage, encoder) == name
        assert vlparams.parse_run(name) == (3, encoder)
        assert re.fullmatch(constraint, name)

"""The Snakemake DAG: the smoke overlay end to end, reruns after a config change, config validation, lint.

These run Snakemake as a user would, in a copy of the workflow in a temporary directory.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from vlbind import captions as vlcaptions
from vlbind import config as vlconfig
from vlbind import schema as vlschema
from vlbind import stages as vlstages

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
SMOKE = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/smoke.yaml"])
RUNS = {v: vlconfig.variant_runs(SMOKE, v) for v in VARIANTS}  # text_only on both seeds, the others on seed 0
assert RUNS["text_only"] == ["seed0", "seed1"] and RUNS["image_text"] == [f"seed0-{e}" for e in ENCODERS]


def seeds_of(stage: str) -> list[int]:
    """The seeds the smoke DAG trains `stage` on (variant_seeds: seed 1 trains text_only's lineage only)."""
    return sorted({vlconfig.parse_run(r)[0] for v in VARIANTS for r in RUNS[v]
                   if stage in vlstages.lineage(vlstages.VARIANT_STAGE[v])})


TRAINED = [(f"seed{s}", st) for st in TEXT_STAGES for s in seeds_of(st)]
TRAINED += [(f"seed{s}-{e}", st) for st in VISION_STAGES for s in seeds_of(st) for e in ENCODERS]


def snakemake(workdir, *args, check=True, cores="2"):
    cores = ["--cores", cores] if cores else []  # None: what the profile says
    proc = subprocess.run([*SNAKEMAKE, *cores, *args], cwd=workdir, capture_output=True, text=True)
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


def dry_run_with(tree: Path, tmp_path: Path, overlay: str) -> set[tuple[str, str]]:
    """The jobs a dry run schedules in `tree` with the smoke config plus `overlay` (YAML text)."""
    (tmp_path / "change.yaml").write_text(overlay)
    return scheduled(snakemake(tree, "-n", "--configfile", "config/smoke.yaml", str(tmp_path / "change.yaml")).stdout)


def downstream_of_models(variants, encoder=None) -> set[tuple[str, str]]:
    """What retraining the models of `variants` (of one `encoder`'s runs, if given) reruns after them:
    evaluation, analyses, figures, tables."""
    runs = {v: [r for r in RUNS[v] if encoder is None or r.endswith(f"-{encoder}")] for v in variants}
    jobs = {("evaluate", f"variant={v}, run={r}") for v in variants for r in runs[v]}
    jobs |= {("analyze", f"variant={v}, run={r}") for v in variants if v in ANALYSED for r in runs[v]}
    return jobs | {("accuracy_figures", ""), ("ood_table", ""), ("training_table", ""), ("all", ""), ("circuits", ""),
                   ("claims", ""), ("interp_figures", "")}


@pytest.fixture(scope="module")
def smoke_tree(tmp_path_factory):
    work = copy_workflow(tmp_path_factory.mktemp("smoke"))
    # the default target (every figure and table) and the Qwen sub-DAG on tiny models, in one scheduler
    proc = snakemake(work, "all", "qwen_all", "--configfile", "config/smoke.yaml")
    (work / "snakemake.out").write_text(proc.stdout + proc.stderr)
    return work


def test_smoke_dag_draws_fig3_fig7_and_fig8_with_every_variant(smoke_tree):
    for out in ("results/figures/fig3.pdf", "results/figures/fig7.pdf", "results/figures/fig8.pdf"):
        assert (smoke_tree / out).read_bytes().startswith(b"%PDF")
    table = pd.concat(pd.read_parquet(p) for p in (smoke_tree / "results/eval").rglob("*.parquet"))
    assert set(table["variant"]) == set(VARIANTS)
    for v in VARIANTS:
        assert set(table.loc[table["variant"] == v, "run"]) == set(RUNS[v])
    assert table["n_objects"].min() == 2 and table["n_objects"].max() == 12
    assert "diverged" in table and not table["diverged"].any()
    assert (table.groupby(["variant", "run"])["order"].agg(tuple) == ("fixed",) * 11 + ("shuffled",) * 11).all()
    summary = pd.read_csv(smoke_tree / "results/tables/ood_accuracy.csv", index_col=["order", "variant"])
    assert list(summary.index) == [(o, v) for o in ("fixed", "shuffled") for v in VARIANTS]
    assert all(summary.loc[(o, v), "runs"] == len(RUNS[v]) for o, v in summary.index)
    training = pd.read_csv(smoke_tree / "results/tables/training.csv")
    assert len(training) == len(TRAINED)
    assert (training["steps"] + training["ramp_steps"] == 10).all()  # text_s4's ramp: its lengths share its cap
    assert (training.loc[training["stage"] == "text_s4", "ramp_steps"] == 10).all()  # 2 objects, no plateau in 10


def test_the_dag_ends_by_saying_how_many_runs_converged(smoke_tree):
    out = (smoke_tree / "snakemake.out").read_text()
    summary = pd.read_csv(smoke_tree / "results/tables/ood_accuracy.csv")
    assert len(summary) == 2 * len(VARIANTS)
    for r in summary.itertuples():
        assert f"{r.order:<9} {r.variant:<18} {r.runs} of {r.runs} runs converged, OOD {100 * r.ood_mean:.1f}" in out


def test_smoke_dag_runs_every_analysis_on_every_model_and_draws_their_figures(smoke_tree):
    for fig in INTERP_FIGURES:
        assert (smoke_tree / f"results/figures/{fig}.pdf").read_bytes().startswith(b"%PDF")
    for analysis in ANALYSES:
        for v in ANALYSED:
            for run in RUNS[v]:
                t = pd.read_parquet(smoke_tree / f"results/interp/{analysis}/{v}/{run}.parquet")
                assert len(t) and (t["variant"] == v).all() and (t["run"] == run).all()
    circuits = pd.read_csv(smoke_tree / "results/tables/circuits.csv")
    assert len(circuits) == sum(len(RUNS[v]) for v in ANALYSED)
    assert set(circuits["circuit"]) <= {"Positional", "Symbolic-A", "Symbolic-B", "unresolved", "none"}


def test_every_stage_has_a_checkpoint_and_every_job_a_log(smoke_tree):
    for run, stage in TRAINED:
        d = smoke_tree / f"results/models/{run}/{stage}"
        assert {"model.safetensors", "meta.json", "metrics.parquet", "train.log"} <= {p.name for p in d.iterdir()}
        assert (smoke_tree / f"results/logs/train/{run}/{stage}.log").stat().st_size > 0
    assert len(list((smoke_tree / "results/logs/evaluate").rglob("*.log"))) == sum(len(r) for r in RUNS.values())
    logs = ["render/per_object.log", "figures/fig7.log", "encoders/cnn_tiny.log"]
    for log in logs + [f"features/{e}/per_object.log" for e in ENCODERS]:
        assert (smoke_tree / "results/logs" / log).stat().st_size > 0
    model_jobs = ["train/seed0/text_s1.log", "train/seed0-cnn_tiny/image.log", "evaluate/text_only/seed0.log",
                  "interp/image_text/seed0-vit_tiny.log", "features/vit_tiny/per_object.log",
                  "encoders/cnn_tiny.log"]
    for log in model_jobs:  # where it ran and in which precision, in its first lines
        head = (smoke_tree / "results/logs" / log).read_text().splitlines()[:3]
        assert any(re.search(r"device cpu, 1 thread, (bf16 autocast|fp32)$", line) for line in head), (log, head)
    for encoder, dim in (("vit_tiny", 192), ("cnn_tiny", 512)):
        meta = json.loads((smoke_tree / f"results/models/seed0-{encoder}/image/meta.json").read_text())
        assert meta["parent"] == "results/models/seed0/grounding" and meta["model_config"]["image_dim"] == dim


def test_a_changed_features_index_reruns_the_vision_stages_that_read_it(smoke_tree):
    index = smoke_tree / f"results/features/{ENCODER}/per_object.json"
    text, stat = index.read_text(), index.stat()
    try:
        index.write_text("garbled")
        jobs = scheduled(snakemake(smoke_tree, "-n", "--configfile", "config/smoke.yaml").stdout)
    finally:  # leave the tree as the other tests expect it
        index.write_text(text)
        os.utime(index, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    readers = {("train_vision", f"seed={s}, encoder={ENCODER}, stage={st}") for st in ("image", "mixed")
               for s in seeds_of(st)}
    assert readers <= jobs


def test_complete_tree_schedules_nothing(smoke_tree):
    out = snakemake(smoke_tree, "-n", "--configfile", "config/smoke.yaml").stdout
    assert "Nothing to be done" in out


def test_changed_stage_parameter_reruns_exactly_that_stage_and_descendants(smoke_tree, tmp_path):
    jobs = dry_run_with(smoke_tree, tmp_path, "stages:\n  text_s3:\n    train: {lr: 0.002}\n")
    expected = {("train_text", f"seed={s}, stage={st}") for st in TEXT_STAGES[2:] for s in seeds_of(st)}
    expected |= {("train_vision", f"seed={s}, encoder={e}, stage={st}")
                 for st in VISION_STAGES for s in seeds_of(st) for e in ENCODERS}
    assert jobs == expected | downstream_of_models(VARIANTS)


def test_changed_probe_setting_reruns_the_analyses_and_what_reads_them_and_no_evaluation(smoke_tree, tmp_path):
    """A model's four analyses are one job: a probe setting reruns that job of every analysed model."""
    jobs = dry_run_with(smoke_tree, tmp_path, "interp:\n  probes: {ridge: 2.0}\n")
    expected = {("analyze", f"variant={v}, run={r}") for v in ANALYSED for r in RUNS[v]}
    expected |= {("circuits", ""), ("claims", ""), ("all", ""), ("interp_figures", "")}
    assert jobs == expected


def test_changed_encoder_setting_reruns_only_its_features_and_vision_stages(smoke_tree, tmp_path):
    jobs = dry_run_with(smoke_tree, tmp_path, f"encoders:\n  {ENCODER}: {{grid: 1}}\n")
    expected = {("extract_features", f"encoder={ENCODER}, layout=per_object")}
    expected |= {("train_vision", f"seed={s}, encoder={ENCODER}, stage={st}") for st in VISION_STAGES
                 for s in seeds_of(st)}
    assert jobs == expected | downstream_of_models(IMAGE_VARIANTS, ENCODER)


def test_changed_pretraining_setting_repretrains_that_encoder_and_reruns_its_features_and_vision_stages(
        smoke_tree, tmp_path):
    jobs = dry_run_with(smoke_tree, tmp_path, "encoders:\n  cnn_tiny: {pretrain: {lr: 0.01}}\n")
    expected = {("pretrain_encoder", "encoder=cnn_tiny"), ("extract_features", "encoder=cnn_tiny, layout=per_object")}
    expected |= {("train_vision", f"seed={s}, encoder=cnn_tiny, stage={st}") for st in VISION_STAGES
                 for s in seeds_of(st)}
    assert jobs == expected | downstream_of_models(IMAGE_VARIANTS, "cnn_tiny")


def test_a_changed_grid_of_a_pretrained_encoder_reextracts_its_features_without_pretraining_it(smoke_tree, tmp_path):
    """Pretraining reads the encoder's timm_name, model_kwargs and pretrain section only (config.pretrain_spec):
    `grid` pools the features, so it reruns extraction and the vision stages, not pretrain_encoder."""
    jobs = dry_run_with(smoke_tree, tmp_path, "encoders:\n  cnn_tiny: {grid: 2}\n")
    expected = {("extract_features", "encoder=cnn_tiny, layout=per_object")}
    expected |= {("train_vision", f"seed={s}, encoder=cnn_tiny, stage={st}") for st in VISION_STAGES
                 for s in seeds_of(st)}
    assert jobs == expected | downstream_of_models(IMAGE_VARIANTS, "cnn_tiny")


def test_changed_eval_setting_retrains_nothing(smoke_tree, tmp_path):
    jobs = dry_run_with(smoke_tree, tmp_path, "evaluate: {prompts_per_length: 8}\n")
    assert {rule for rule, _ in jobs} == {"evaluate", "accuracy_figures", "ood_table", "claims", "all"}


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
            "import vlbind.figures, vlbind.qwen.figures, vlbind.outcomes, vlbind.tables, vlbind.interp; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    consumers = [ROOT / "src/vlbind/evaluate.py", *(ROOT / "src/vlbind/interp").glob("*.py")]
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
    config.stage_section, never written into the config."""
    import copy

    raw = {}
    for path in ["config/config.yaml", *overlays]:
        raw = vlconfig.deep_merge(raw, yaml.safe_load((ROOT / path).read_text()))
    before = copy.deepcopy(raw)
    assert vlconfig.validate(raw) == before and raw == before


def test_rule_params_do_not_depend_on_the_order_keys_were_merged_in():
    """Snakemake compares params as written: the same settings in another key order must not rerun a job."""

    def reverse(d):
        return {k: reverse(d[k]) for k in reversed(list(d))} if isinstance(d, dict) else d

    config = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/smoke.yaml"])
    flipped = reverse(config)
    for stage, encoder in (("text_s1", None), ("image", ENCODER)):
        a = yaml.safe_dump(vlconfig.stage_params(config, stage, encoder), sort_keys=False)
        b = yaml.safe_dump(vlconfig.stage_params(flipped, stage, encoder), sort_keys=False)
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
        assert vlconfig.stage_params(written, stage) == vlconfig.stage_params(config, stage), stage
    # a setting moved off its default is a change
    changed = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    changed["stages"]["text_s5"]["train"]["queries"] = {"one": "all", "all": "one"}[
        vlconfig.stage_train(config, "text_s5").get("queries", defaults["queries"])]
    assert vlconfig.stage_params(changed, "text_s5") != vlconfig.stage_params(config, "text_s5")


def test_bf16_on_a_cpu_without_bf16_instructions_warns_with_the_key_and_auto_picks_fp32(monkeypatch):
    import warnings

    from vlbind import device

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


def test_qwen_sub_dag_runs_on_tiny_models_to_every_figure_and_table1(smoke_tree):
    work = smoke_tree  # built with qwen_all
    for fig in ("fig2", "fig6", "fig14", "fig15"):
        assert (work / f"results/figures/{fig}.pdf").read_bytes().startswith(b"%PDF")
    table = pd.concat(pd.read_parquet(p) for p in (work / "results/qwen/retrieval").rglob("*.parquet"))
    models = yaml.safe_load((ROOT / "config/config.yaml").read_text())["qwen"]["models"]
    assert set(table["model"]) == set(models) and table["tiny"].all()
    assert len(table) == len(models) * 2 * 2 * (2 + 4)  # models x tasks x contexts x queries per length
    assert set(table.groupby("model")["kind"].first()) == {"llm", "vlm"}
    t1 = pd.read_csv(work / "results/tables/table1.csv")
    assert sorted(t1["model"]) == sorted(models)
    assert {"peak_layer", "ratio_share", "ratio_fit", "vlm_minus_llm_share", "vlm_minus_llm_fit"} <= set(t1.columns)
    probes = pd.concat(pd.read_parquet(p) for p in (work / "results/qwen/probes").glob("*.parquet"))
    assert set(probes["model"]) == set(models) and set(probes["role"]) == {"context shape", "association shape"}


def test_qwen_all_on_the_paper_config_lists_six_models_with_a_gpu_each(workflow_copy):
    work = workflow_copy
    out = snakemake(work, "-n", "qwen_all").stdout
    blocks = [b for b in re.split(r"\n(?=(?:localrule|rule) )", out) if b.startswith("rule qwen_retrieval:")]
    assert len(blocks) == 6 and all(re.search(r"resources:.*\bgpu=1\b", b) for b in blocks)
    analyses = [b for b in re.split(r"\n(?=(?:localrule|rule) )", out) if b.startswith("rule qwen_analyze:")]
    assert len(analyses) == 6 and all(re.search(r"resources:.*\bgpu=1\b", b) for b in analyses)
    assert "qwen_retrieval" not in snakemake(work, "-n").stdout  # not part of `all`: it needs the weights


REPORTED = [f"results/figures/{f}.pdf" for f in ["fig3", "fig7", "fig8", *INTERP_FIGURES, "fig2", "fig6", "fig14",
                                                  "fig15"]]
REPORTED += [f"results/tables/{t}.csv" for t in ("ood_accuracy", "training", "circuits", "claims", "table1")]


def test_report_holds_every_figure_and_table_with_a_caption(smoke_tree):
    snakemake(smoke_tree, "all", "qwen_all", "--report", "report.html", "--configfile", "config/smoke.yaml")
    html = (smoke_tree / "report.html").read_text()
    for path in REPORTED:
        entry = re.search(re.escape(f'"{path}": {{') + r'.*?"caption": "(.*?)", "mime_type"', html)
        assert entry, f"{path} is not in the report"
        caption = re.sub(r"<[^>]+>|\\n", " ", entry.group(1)).strip()
        assert len(caption) > 40, f"{path}: caption {caption!r}"
    for category in ("1 Generalization", "2 Training", "3 Analyses", "4 Qwen"):
        assert category in html


def readme_blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


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
            argv = [*SNAKEMAKE, *argv[1:], "-n"]
        elif argv[0] == "python":
            argv = [sys.executable, *argv[1:]]
        else:
            raise AssertionError(f"README command {command!r}: teach this test to run it")
        proc = subprocess.run(argv, cwd=smoke_tree, capture_output=True, text=True)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"


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
        assert all(vlconfig.stage_section(cfg, s)["task"]["shuffle"] for s in stages)
        assert (cfg["evaluate"]["orders"][0], cfg["interp"]["order"]) == ("shuffled", "shuffled")
    s4, paper_s4 = (vlconfig.stage_params(c, "text_s4") for c in (mini, paper))
    assert s4["train"]["max_steps"] > 0 and s4["train"]["ramp"] and s4["task"]["solo_fraction"] > 0
    assert s4["train"]["batch_size"] == paper_s4["train"]["batch_size"]
    assert (s4["train"]["lr"], paper_s4["train"]["lr"]) == (1.0e-3, 3.0e-4)
    assert mini["evaluate"]["orders"] == ["shuffled", "fixed"]
    for base, encoder_of in ((paper, "resnet152"), (mini, "render_cnn")):
        names = ["config/config.yaml", *(["config/mini.yaml"] if base is mini else []), "config/fixed_text.yaml"]
        fixed = vlconfig.load([ROOT / n for n in names])
        assert {s: vlconfig.stage_section(fixed, s)["task"]["shuffle"] for s in stages} == {
            "text_s4": True, "text_s5": False, "noise_text": False, **dict.fromkeys(vlstages.VISION_STAGES, True)}
        assert vlconfig.stage_params(fixed, "text_s4")["train"]["max_steps"] == 0
        assert (fixed["evaluate"]["orders"], fixed["interp"]["order"]) == (["fixed", "shuffled"], "fixed")
        for s in vlstages.STAGE_PARENTS:
            encoder = encoder_of if vlconfig.uses_images(base, s) else None
            if s not in ("text_s4", "text_s5", "noise_text", "text_bind", "noise_text_bind"):  # controls: parent's
                assert vlconfig.stage_params(fixed, s, encoder) == vlconfig.stage_params(base, s, encoder), s


def test_the_control_arm_is_its_text_parent_plus_the_image_arms_binding_loss_and_figures_say_so():
    mini = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    params = {s: vlconfig.stage_params(mini, s) for s in ("text_s5", "noise_text", "image_text", *CONTROL_STAGES)}
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
        on, without = (vlconfig.stage_params(c, stage, "render_cnn") for c in (mini, off))
        assert on["start"]["task"]["max_objects"] == 2 and "start" not in without
        assert {k: v for k, v in on.items() if k != "start"} == without
    assert vlconfig.stage_params(off, "image_text", "render_cnn")["start"]["steps"] == 1000  # other starts stay


def test_the_curriculum_control_is_the_image_arm_with_every_context_in_text():
    """Each curriculum stage is its image stage's section (task, start, train: caps, binding loss) with
    image_fraction 0, from the same parent (grounding), trained once per seed (no encoder, no projector)."""
    for overlays in (["config/config.yaml"], ["config/config.yaml", "config/mini.yaml"]):
        config = vlconfig.load([ROOT / p for p in overlays])
        encoder = config["vision"]["encoders"][0]
        for stage, image_stage in vlstages.CURRICULUM.items():
            ours, theirs = vlconfig.stage_params(config, stage), vlconfig.stage_params(config, image_stage, encoder)
            assert ours["task"] == {**theirs["task"], "image_fraction": 0.0}
            assert ours["train"] == theirs["train"]
            if "start" in theirs:
                assert ours["start"] == {**theirs["start"], "task": {**theirs["start"]["task"], "image_fraction": 0.0}}
            assert "start" in ours or "start" not in theirs
            assert not {"encoder", "projector"} & set(ours) and not vlconfig.uses_images(config, stage)
            parent = vlstages.STAGE_PARENTS[image_stage]
            assert ours["parent"] == {v: k for k, v in vlstages.CURRICULUM.items()}.get(parent, parent)
            assert vlconfig.run_name(0, stage, encoder) == "seed0"
    mini = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    assert vlconfig.stage_params(mini, "curriculum_image")["start"]["task"]["max_objects"] == 2
    assert vlconfig.stage_params(mini, "curriculum_text")["train"]["binding_loss"] == 1.0
    assert "curriculum_text, noise_curriculum_text: shuffled lists, binding loss 1 from " \
           "curriculum_image on" in vlcaptions.training_note(mini, mini["variants"])


def test_a_changed_image_stage_setting_reruns_its_curriculum_copy_too(smoke_tree, tmp_path):
    jobs = dry_run_with(smoke_tree, tmp_path, "stages:\n  image_text:\n    train: {lr: 0.002}\n")
    expected = {("train_text", f"seed={s}, stage={st}") for st in CURRICULUM_STAGES[2:] for s in seeds_of(st)}
    expected |= {("train_vision", f"seed={s}, encoder={e}, stage={st}")
                 for st in VISION_STAGES[2:] for s in seeds_of(st) for e in ENCODERS}
    assert jobs == expected | downstream_of_models(IMAGE_VARIANTS + CURRICULUM_VARIANTS)


def test_a_control_added_to_variants_trains_only_itself(smoke_tree, tmp_path):
    jobs = dry_run_with(smoke_tree, tmp_path, f"variants: [{', '.join(VARIANTS)}, text_bind]\n")
    assert {j for j in jobs if j[0].startswith("train_")} == {("train_text", f"seed={s}, stage=text_bind")
                                                            for s in SEEDS}
    assert {("evaluate", f"variant=text_bind, run=seed{s}") for s in SEEDS} <= jobs


def test_the_smoke_dag_writes_the_claims_table(smoke_tree):
    claims = pd.read_csv(smoke_tree / "results/tables/claims.csv")
    wanted = {"text_positional", "image_beats_text", "noise_helps_text", "images_not_curriculum",
              "noise_images_not_curriculum", "curriculum_helps_text", "curriculum_symbolic",
              "curriculum_learns_shuffled"}
    assert wanted <= set(claims["claim"])
    assert set(claims["verdict"]) <= {"holds", "fails", "mixed", "untested"} and claims["rule"].str.len().min() > 20


def test_training_priority_is_the_longest_chain_below_a_stage():
    """Snakemake runs ready jobs by priority: the stage with the longest chain of stages after it first, so a run's
    critical path (its longest lineage) is never left for last."""

    leaves = [s for s in vlstages.STAGE_PARENTS if s not in vlstages.STAGE_PARENTS.values()]
    assert sorted(leaves) == ["noise_curriculum_text", "noise_image_text", "noise_text_bind", "text_bind",
                              "text_bind_shuffled"]
    for stage in vlstages.STAGE_PARENTS:
        longest = max(len(vlstages.lineage(leaf)) - vlstages.lineage(leaf).index(stage)
                      for leaf in leaves if stage in vlstages.lineage(leaf))
        assert vlstages.chain_below(stage) == longest, stage
    assert vlstages.chain_below("text_s1") == len(vlstages.lineage("noise_image_text"))


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

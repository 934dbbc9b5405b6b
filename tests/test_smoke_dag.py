"""The smoke DAG end to end (config/smoke.yaml: the default target and the Qwen sub-DAG on tiny models, built once
in a tree of its own: tests/conftest.py's smoke_tree) and what reruns in that tree after a config change. These tests
are slow (tests/conftest.py); they run first, so that one worker starts building the tree at once, and the tests that
change a file of the tree and restore it are here, in one file, so that no other test reads the tree meanwhile.
"""

import json
import os
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from test_workflow import (
    ANALYSED,
    ANALYSES,
    CURRICULUM_STAGES,
    CURRICULUM_VARIANTS,
    ENCODER,
    ENCODERS,
    IMAGE_VARIANTS,
    INTERP_FIGURES,
    ROOT,
    SEEDS,
    TEXT_STAGES,
    VARIANTS,
    VISION_STAGES,
    scheduled,
    snakemake,
)

from vlbind import config as vlconfig
from vlbind import params as vlparams
from vlbind.core import stages as vlstages

SMOKE = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/smoke.yaml"])
RUNS = {v: vlparams.variant_runs(SMOKE, v) for v in VARIANTS}  # text_only on both seeds, the others on seed 0
assert RUNS["text_only"] == ["seed0", "seed1"] and RUNS["image_text"] == [f"seed0-{e}" for e in ENCODERS]


def seeds_of(stage: str) -> list[int]:
    """The seeds the smoke DAG trains `stage` on (variant_seeds: seed 1 trains text_only's lineage only)."""
    return sorted({vlparams.parse_run(r)[0] for v in VARIANTS for r in RUNS[v]
                   if stage in vlstages.lineage(vlstages.VARIANT_STAGE[v])})


TRAINED = [(f"seed{s}", st) for st in TEXT_STAGES for s in seeds_of(st)]
TRAINED += [(f"seed{s}-{e}", st) for st in VISION_STAGES for s in seeds_of(st) for e in ENCODERS]


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
    for c in circuits.itertuples():  # each run's retries, as its evaluation table has them
        ev = pd.read_parquet(smoke_tree / f"results/eval/{c.variant}/{c.run}.parquet")
        assert c.retries == ev["retries"].max()


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


def test_memory_and_speed_settings_rerun_nothing(smoke_tree, tmp_path):
    """vision.extract_batch_size, evaluate.batch_size, qwen.generation.batch_size and qwen.binding.layers_per_batch
    change no result (tests in test_vision, test_train, test_qwen_*): on a finished tree, no job reruns for them."""
    (tmp_path / "change.yaml").write_text("vision: {extract_batch_size: 3}\nevaluate: {batch_size: 7}\n"
                                          "qwen: {generation: {batch_size: 3}, binding: {layers_per_batch: 5}}\n")
    out = snakemake(smoke_tree, "all", "qwen_all", "-n", "--configfile", "config/smoke.yaml",
                    str(tmp_path / "change.yaml")).stdout
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
    """Pretraining reads the encoder's timm_name, model_kwargs and pretrain section only (params.pretrain_spec):
    `grid` pools the features, so it reruns extraction and the vision stages, not pretrain_encoder."""
    jobs = dry_run_with(smoke_tree, tmp_path, "encoders:\n  cnn_tiny: {grid: 2}\n")
    expected = {("extract_features", "encoder=cnn_tiny, layout=per_object")}
    expected |= {("train_vision", f"seed={s}, encoder=cnn_tiny, stage={st}") for st in VISION_STAGES
                 for s in seeds_of(st)}
    assert jobs == expected | downstream_of_models(IMAGE_VARIANTS, "cnn_tiny")


def test_changed_eval_setting_retrains_nothing(smoke_tree, tmp_path):
    """An evaluation setting reruns the evaluations and what reads them, no training and no analysis: circuits.csv
    (each run's retries) and the analyses' figures are redrawn from the analyses' tables."""
    jobs = dry_run_with(smoke_tree, tmp_path, "evaluate: {prompts_per_length: 8}\n")
    assert {rule for rule, _ in jobs} == {"evaluate", "accuracy_figures", "ood_table", "claims", "circuits",
                                          "interp_figures", "all"}


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


def test_the_noise_control_added_to_variants_trains_only_itself_after_its_twin(smoke_tree, tmp_path):
    jobs = dry_run_with(smoke_tree, tmp_path, f"variants: [{', '.join(VARIANTS)}, text_long]\n")
    # its twin's meta.json is an input: noise_text trains first where the variants had not trained it (seed 1)
    twin = {("train_text", f"seed={s}, stage=noise_text") for s in SEEDS if s not in seeds_of("noise_text")}
    assert {j for j in jobs if j[0].startswith("train_")} == twin | {("train_text", f"seed={s}, stage=text_long")
                                                                     for s in SEEDS}
    assert twin and {("evaluate", f"variant=text_long, run=seed{s}") for s in SEEDS} <= jobs


def test_the_smoke_dag_writes_the_claims_table(smoke_tree):
    claims = pd.read_csv(smoke_tree / "results/tables/claims.csv")
    wanted = {"text_positional", "image_beats_text", "noise_helps_text", "images_not_curriculum",
              "noise_images_not_curriculum", "curriculum_helps_text", "curriculum_symbolic",
              "curriculum_learns_shuffled"}
    assert wanted <= set(claims["claim"])
    assert set(claims["verdict"]) <= {"holds", "fails", "mixed", "untested"} and claims["rule"].str.len().min() > 20


def test_the_tree_s_first_snakemake_run_read_from_its_log_is_the_build_snakemake_printed(smoke_tree):
    """tables.scheduler_runs on the tree's .snakemake/log (export.py's scheduler_runs.csv): the build, done, with the
    jobs and the elapsed time Snakemake printed to its output (snakemake.out)."""
    from vlbind.evaluation.tables import scheduler_runs

    build = scheduler_runs(smoke_tree / ".snakemake/log").iloc[0]
    out = (smoke_tree / "snakemake.out").read_text()
    done, total = re.findall(r"(\d+) of (\d+) steps \(100%\) done", out)[-1]
    h, m, s = re.search(r"Elapsed time: (\d+):(\d+):([\d.]+)", out).groups()
    assert (build.outcome, build.ended_from, build.jobs) == ("done", "exit", int(total)) and done == total
    assert build.minutes == pytest.approx(60 * int(h) + int(m) + float(s) / 60)

# Figures and tables read only result tables; restyling one reruns nothing upstream.
# The module that draws a figure is an input (and figures/base.py), so editing the plotting code redraws it.


rule accuracy_figures:
    """Figure 3 (means over runs) and Figure 8 (every run) from the evaluation tables, in one job."""
    input:
        tables=eval_tables(),
        code=[f"{REPO}/src/vlbind/figures/accuracy.py", f"{REPO}/src/vlbind/figures/base.py"],
    output:
        **figure_outputs(("fig3", "fig8"), "1 Generalization (both arms)"),
    log:
        "results/logs/figures/accuracy_figures.log",
    benchmark:
        "results/benchmarks/figures/accuracy_figures.tsv"
    conda:
        "../envs/vlbind.yaml"
    params:
        note=vlcaptions.figure_note(config),
        trained=vlcaptions.training_note(config, config["variants"]),  # the captions'
    script:
        "../../scripts/figure.py"


rule training_table:
    input:
        meta=all_meta(),
        code=f"{REPO}/src/vlbind/evaluation/tables.py",
    output:
        csv=report(
            "results/tables/training.csv",
            caption="../report/training_table.rst",
            category="2 Training (text and vision arms)",
        ),
    log:
        "results/logs/figures/training_table.log",
    benchmark:
        "results/benchmarks/figures/training_table.tsv"
    conda:
        "../envs/vlbind.yaml"
    script:
        "../../scripts/training_table.py"


rule ood_table:
    input:
        tables=eval_tables(),
        code=f"{REPO}/src/vlbind/evaluation/tables.py",
    output:
        csv=report(
            "results/tables/ood_accuracy.csv",
            caption="../report/ood_table.rst",
            category="1 Generalization (both arms)",
        ),
    log:
        "results/logs/figures/ood_table.log",
    benchmark:
        "results/benchmarks/figures/ood_table.tsv"
    conda:
        "../envs/vlbind.yaml"
    script:
        "../../scripts/ood_table.py"


rule fig7:
    input:
        objects=f"{BANK}/objects.parquet",
        images=f"{BANK}/images",
        code=[f"{REPO}/src/vlbind/figures/accuracy.py", f"{REPO}/src/vlbind/figures/base.py"],
    output:
        pdf=report(
            "results/figures/fig7.pdf",
            caption="../report/fig7.rst",
            category="2 Training (text and vision arms)",
        ),
    log:
        "results/logs/figures/fig7.log",
    benchmark:
        "results/benchmarks/figures/fig7.tsv"
    conda:
        "../envs/vlbind.yaml"
    script:
        "../../scripts/fig7.py"


rule seed_table:
    """Pass fractions and steps to target of every unit (stage, ramp length) of a stage's lineage over the seeds
    (`seeds`; for an image-arm stage over seeds and encoders): the many-seed view of the retry rule."""
    input:
        meta=lambda wc: list(
            dict.fromkeys(  # a text stage's file once, whatever the encoders below it
                model_file(seed, s, enc, "meta.json")
                for s in vlstages.lineage(wc.stage)
                for seed in SEEDS
                for enc in (ENCODERS if wc.stage in vlstages.VISION_STAGES else [None])
            )
        ),
        code=f"{REPO}/src/vlbind/evaluation/tables.py",
    output:
        csv="results/tables/seeds/{stage}.csv",
        pdf="results/figures/seeds/{stage}.pdf",
    log:
        "results/logs/figures/seeds/{stage}.log",
    conda:
        "../envs/vlbind.yaml"
    params:
        stages=lambda wc: vlstages.lineage(wc.stage),
        note=config["figure_note"],
    script:
        "../../scripts/seed_table.py"

# Pretrained Qwen LLMs vs VLMs (paper, section 2, appendices A, B). Not part of `all` (they need the weights):
# `snakemake qwen_all`. With qwen.tiny: true every job uses a tiny random model of its class instead.


rule qwen_retrieval:
    """Both retrieval tasks of one model in one job, the model loaded once."""
    output:
        **{task: f"results/qwen/retrieval/{{model}}/{task}.parquet" for task in ("direct", "indirect")},
    log:
        "results/logs/qwen/retrieval/{model}.log",
    benchmark:
        "results/benchmarks/qwen/retrieval/{model}.tsv"
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("qwen"),
    params:
        **QWEN_MODEL_PARAMS,
        prompts=vlparams.canonical(QWEN["prompts"]),
        generation=vlparams.result_params(config, "qwen.generation"),  # batch_size: read by the job
    script:
        "../../scripts/qwen_retrieval.py"


rule qwen_retrieval_figures:
    input:
        tables=qwen_tables(),
        code=f"{REPO}/src/vlbind/qwen/figures.py",
    output:
        **figure_outputs(("fig2", "fig6"), "4 Qwen LLMs vs VLMs"),
    log:
        "results/logs/figures/qwen_retrieval_figures.log",
    conda:
        "../envs/vlbind.yaml"
    params:
        note=QWEN_NOTE,
    script:
        "../../scripts/qwen_figure.py"


rule qwen_analyze:
    """The binding interchange (Table 1) and the color probes (fig14, fig15) of one model in one job, the model
    loaded once; retrieval, the costly sampled part, stays a job of its own."""
    output:
        binding="results/qwen/binding/{model}.parquet",
        probes="results/qwen/probes/{model}.parquet",
    log:
        "results/logs/qwen/analyze/{model}.log",
    benchmark:
        "results/benchmarks/qwen/analyze/{model}.tsv"
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("qwen"),
    params:
        **QWEN_MODEL_PARAMS,
        binding=vlparams.result_params(config, "qwen.binding"),  # layers_per_batch: read by the job
        probes=vlparams.canonical(QWEN["probes"]),
    script:
        "../../scripts/qwen_analyze.py"


rule table1:
    input:
        tables=expand("results/qwen/binding/{model}.parquet", model=QWEN["models"]),
        code=f"{REPO}/src/vlbind/qwen/binding.py",
    output:
        csv=report(
            "results/tables/table1.csv",
            caption="../report/table1.rst",
            category="4 Qwen LLMs vs VLMs",
        ),
    log:
        "results/logs/figures/table1.log",
    conda:
        "../envs/vlbind.yaml"
    params:
        binding=vlparams.result_params(config, "qwen.binding"),
    script:
        "../../scripts/qwen_table1.py"


rule qwen_probe_figures:
    input:
        tables=expand("results/qwen/probes/{model}.parquet", model=QWEN["models"]),
        code=f"{REPO}/src/vlbind/qwen/figures.py",
    output:
        **figure_outputs(("fig14", "fig15"), "4 Qwen LLMs vs VLMs"),
    log:
        "results/logs/figures/qwen_probe_figures.log",
    conda:
        "../envs/vlbind.yaml"
    params:
        note=QWEN_NOTE,
    script:
        "../../scripts/qwen_figure.py"


rule qwen_all:
    input:
        rules.qwen_retrieval_figures.output,
        rules.table1.output.csv,
        rules.qwen_probe_figures.output,

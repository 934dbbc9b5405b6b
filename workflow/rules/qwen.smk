# Pretrained Qwen LLMs vs VLMs (paper, section 2, appendices A, B). Not part of `all` (they need the weights):
# `snakemake qwen_all`. With qwen.tiny: true every job uses a tiny random model of its class instead.


rule qwen_retrieval:
    output:
        table="results/qwen/retrieval/{model}/{task}.parquet",
    log:
        "results/logs/qwen/retrieval/{model}/{task}.log",
    benchmark:
        "results/benchmarks/qwen/retrieval/{model}/{task}.tsv"
    wildcard_constraints:
        task="direct|indirect",
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("qwen"),
    params:
        **QWEN_MODEL_PARAMS,
        prompts=vlconfig.canonical(QWEN["prompts"]),
        generation=vlconfig.canonical(QWEN["generation"]),
    script:
        "../../scripts/qwen_retrieval.py"


rule fig2:
    input:
        tables=qwen_tables(),
        code=f"{REPO}/src/vlbind/qwen/figures.py",
    output:
        pdf=report(
            "results/figures/fig2.pdf",
            caption="../report/qwen_retrieval.rst",
            category="4 Qwen LLMs vs VLMs",
        ),
    log:
        "results/logs/figures/fig2.log",
    conda:
        "../envs/vlbind.yaml"
    params:
        note=QWEN_NOTE,
    script:
        "../../scripts/qwen_figure.py"


use rule fig2 as fig6 with:
    output:
        pdf=report(
            "results/figures/fig6.pdf",
            caption="../report/qwen_retrieval.rst",
            category="4 Qwen LLMs vs VLMs",
        ),
    log:
        "results/logs/figures/fig6.log",


rule qwen_binding:
    output:
        table="results/qwen/binding/{model}.parquet",
    log:
        "results/logs/qwen/binding/{model}.log",
    benchmark:
        "results/benchmarks/qwen/binding/{model}.tsv"
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("qwen"),
    params:
        **QWEN_MODEL_PARAMS,
        binding=vlconfig.canonical(QWEN["binding"]),
    script:
        "../../scripts/qwen_binding.py"


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
        binding=vlconfig.canonical(QWEN["binding"]),
    script:
        "../../scripts/qwen_table1.py"


rule qwen_probes:
    output:
        table="results/qwen/probes/{model}.parquet",
    log:
        "results/logs/qwen/probes/{model}.log",
    benchmark:
        "results/benchmarks/qwen/probes/{model}.tsv"
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("qwen"),
    params:
        **QWEN_MODEL_PARAMS,
        probes=vlconfig.canonical(QWEN["probes"]),
    script:
        "../../scripts/qwen_probes.py"


rule fig14:
    input:
        tables=expand("results/qwen/probes/{model}.parquet", model=QWEN["models"]),
        code=f"{REPO}/src/vlbind/qwen/figures.py",
    output:
        pdf=report(
            "results/figures/fig14.pdf",
            caption="../report/qwen_probes.rst",
            category="4 Qwen LLMs vs VLMs",
        ),
    log:
        "results/logs/figures/fig14.log",
    conda:
        "../envs/vlbind.yaml"
    params:
        note=QWEN_NOTE,
    script:
        "../../scripts/qwen_figure.py"


use rule fig14 as fig15 with:
    output:
        pdf=report(
            "results/figures/fig15.pdf",
            caption="../report/qwen_probes.rst",
            category="4 Qwen LLMs vs VLMs",
        ),
    log:
        "results/logs/figures/fig15.log",


rule qwen_all:
    input:
        rules.fig2.output.pdf,
        rules.fig6.output.pdf,
        rules.table1.output.csv,
        rules.fig14.output.pdf,
        rules.fig15.output.pdf,

# Mechanistic analyses of every analysed model (section 5, appendices F-G, layer relevance) and their figures.


rule analyze:
    input:
        model=variant_model,
    output:
        table="results/interp/{analysis}/{variant}/{run}.parquet",
    log:
        "results/logs/interp/{analysis}/{variant}/{run}.log",
    benchmark:
        "results/benchmarks/interp/{analysis}/{variant}/{run}.tsv"
    wildcard_constraints:
        analysis="|".join(ANALYSES),
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("gpu"),
    params:
        settings=lambda wc: vlconfig.canonical(config["interp"][wc.analysis]),
        order=config["interp"]["order"],
        precision=vlconfig.canonical(config["precision"]),
        device=config["device"],
    script:
        "../../scripts/analyze.py"


rule circuits:
    input:
        interchange=interp_tables("interchange"),
        probes=interp_tables("probes"),
        code=f"{REPO}/src/vlbind/interp/circuits.py",
    output:
        csv=report(
            "results/tables/circuits.csv",
            caption="../report/circuits.rst",
            category="3 Analyses",
        ),
    log:
        "results/logs/figures/circuits.log",
    benchmark:
        "results/benchmarks/figures/circuits.tsv"
    conda:
        "../envs/vlbind.yaml"
    params:
        circuits=vlconfig.canonical(config["interp"]["circuits"]),
    script:
        "../../scripts/circuits.py"


rule claims:
    input:
        tables=eval_tables(),
        circuits=rules.circuits.output.csv,
        code=f"{REPO}/src/vlbind/claims.py",
    output:
        csv=report(
            "results/tables/claims.csv",
            caption="../report/claims.rst",
            category="1 Generalization (both arms)",
        ),
    log:
        "results/logs/figures/claims.log",
    benchmark:
        "results/benchmarks/figures/claims.tsv"
    conda:
        "../envs/vlbind.yaml"
    script:
        "../../scripts/claims.py"


rule interp_figure:
    input:
        tables=lambda wc: interp_tables(INTERP_FIGURES[wc.fig]),
        circuits=rules.circuits.output.csv,
        code=f"{REPO}/src/vlbind/figures.py",
    output:
        pdf=report(
            "results/figures/{fig}.pdf",
            caption="../report/interp_figure.rst",
            category="3 Analyses",
        ),
    log:
        "results/logs/figures/{fig}.log",
    benchmark:
        "results/benchmarks/figures/{fig}.tsv"
    wildcard_constraints:
        fig="|".join(INTERP_FIGURES),
    conda:
        "../envs/vlbind.yaml"
    params:
        note=vlcaptions.figure_note(config, config["interp"]["order"]),
        trained=vlcaptions.training_note(config, config["interp"]["variants"]),  # the caption's
    script:
        "../../scripts/interp_figure.py"

# Mechanistic analyses of every analysed model (section 5, appendices F-G, layer relevance) and their figures.


rule analyze:
    """Every analysis of one model in one job, the model loaded once: a changed interp.<analysis> setting reruns
    the analyses of every analysed model (all four), and what reads their tables."""
    input:
        model=variant_model,
    output:
        **{a: f"results/interp/{a}/{{variant}}/{{run}}.parquet" for a in ANALYSES},
    log:
        "results/logs/interp/{variant}/{run}.log",
    benchmark:
        "results/benchmarks/interp/{variant}/{run}.tsv"
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("gpu"),
    params:
        settings={a: vlparams.canonical(config["interp"].get(a, {})) for a in ANALYSES},  # a section where defaults do not serve
        order=config["interp"]["order"],
        precision=vlparams.canonical(config["precision"]),
        device=config["device"],
    script:
        "../../scripts/analyze.py"


rule circuits:
    input:
        interchange=interp_tables("interchange"),
        probes=interp_tables("probes"),
        evals=eval_tables(variants=config["interp"]["variants"]),  # each run's retries
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
        circuits=vlparams.canonical(config["interp"]["circuits"]),
    script:
        "../../scripts/circuits.py"


rule claims:
    input:
        tables=eval_tables(),
        circuits=rules.circuits.output.csv,
        code=f"{REPO}/src/vlbind/evaluation/claims.py",
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


rule interp_figures:
    """Every figure of the analyses in one job (figures/analyses.py is an input: restyling redraws them all)."""
    input:
        **{a: interp_tables(a) for a in ANALYSES},
        circuits=rules.circuits.output.csv,
        code=[f"{REPO}/src/vlbind/figures/analyses.py", f"{REPO}/src/vlbind/figures/base.py"],
    output:
        **figure_outputs(INTERP_FIGURES, "3 Analyses"),
    log:
        "results/logs/figures/interp_figures.log",
    benchmark:
        "results/benchmarks/figures/interp_figures.tsv"
    conda:
        "../envs/vlbind.yaml"
    params:
        analyses=INTERP_FIGURES,
        note=vlcaptions.figure_note(config, config["interp"]["order"]),
        trained=vlcaptions.training_note(config, config["interp"]["variants"]),  # the captions'
    script:
        "../../scripts/interp_figures.py"

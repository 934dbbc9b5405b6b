# Accuracy by number of objects for every variant and run (Figure 3's data), with the divergence verdict.


rule evaluate:
    input:
        model=variant_model,
        curves=variant_lineage("metrics.parquet"),
        metas=variant_lineage("meta.json"),
    output:
        table="results/eval/{variant}/{run}.parquet",
    log:
        "results/logs/evaluate/{variant}/{run}.log",
    benchmark:
        "results/benchmarks/evaluate/{variant}/{run}.tsv"
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("gpu"),
    params:
        evaluate=vlparams.result_params(config, "evaluate"),  # batch_size: read by the job
        divergence=vlparams.canonical(config["divergence"]),
        device=config["device"],
        precision=vlparams.canonical(config["precision"]),
    script:
        "../../scripts/evaluate.py"

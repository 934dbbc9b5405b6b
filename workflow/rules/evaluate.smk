# Accuracy by number of objects for every variant and run (Figure 3's data).


rule evaluate:
    input:
        model=variant_model,
    output:
        table="results/eval/{variant}/{run}.parquet",
    params:
        evaluate=config["evaluate"],
        device=config["device"],
        precision=config["train"]["precision"],
    log:
        "results/logs/evaluate/{variant}/{run}.log",
    benchmark:
        "results/benchmarks/evaluate/{variant}/{run}.tsv"
    threads: config["resources"]["train_threads"]
    resources:
        gpu=config["resources"]["train_gpus"],
    conda:
        "../envs/vlbind.yaml"
    script:
        "../../scripts/evaluate.py"

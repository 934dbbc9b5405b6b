# The image bank (appendix C) and its frozen-encoder features (D.6): each image rendered and encoded once.


rule render_bank:
    output:
        objects="results/banks/{layout}/objects.parquet",
        images=directory("results/banks/{layout}/images"),
    log:
        "results/logs/render/{layout}.log",
    benchmark:
        "results/benchmarks/render/{layout}.tsv"
    priority: 10  # the training path first; analyses fill in the gaps
    conda:
        "../envs/vlbind.yaml"
    params:
        render=lambda wc: vlconfig.canonical({**config["render"], "layout": wc.layout}),
    script:
        "../../scripts/render.py"


rule extract_features:
    input:
        objects="results/banks/{layout}/objects.parquet",
        images="results/banks/{layout}/images",
    output:
        features="results/features/{encoder}/{layout}.npy",
        index="results/features/{encoder}/{layout}.json",
    log:
        "results/logs/features/{encoder}/{layout}.log",
    benchmark:
        "results/benchmarks/features/{encoder}/{layout}.tsv"
    priority: 10  # the training path first; analyses fill in the gaps
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["train_threads"]
    resources:
        gpu=config["resources"]["train_gpus"],
        runtime=config["resources"]["train_runtime_min"],
        mem_mb=config["resources"]["train_mem_mb"],
    params:
        encoder=lambda wc: vlconfig.encoder_spec(config, wc.encoder),
        batch_size=config["vision"]["extract_batch_size"],
        precision=vlconfig.canonical(config["vision"]["precision"]),
        device=config["device"],
    script:
        "../../scripts/extract_features.py"

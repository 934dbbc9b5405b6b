# The image bank (appendix C) and its frozen-encoder features (D.6): each image rendered and encoded once.


rule render_bank:
    output:
        objects="results/banks/{layout}/objects.parquet",
        images=directory("results/banks/{layout}/images"),
    log:
        "results/logs/render/{layout}.log",
    benchmark:
        "results/benchmarks/render/{layout}.tsv"
    priority: 10 + vlstages.chain_below(vlstages.VISION_STAGES[0])  # as the first image stage they feed
    conda:
        "../envs/vlbind.yaml"
    params:
        render=lambda wc: vlparams.canonical({**config["render"], "layout": wc.layout}),
    script:
        "../../scripts/render.py"


rule pretrain_encoder:
    output:
        weights=vlparams.pretrained_encoder_file("{encoder}"),
        report="results/encoders/{encoder}.json",
    log:
        "results/logs/encoders/{encoder}.log",
    benchmark:
        "results/benchmarks/encoders/{encoder}.tsv"
    priority: 10 + vlstages.chain_below(vlstages.VISION_STAGES[0])  # as the first image stage it feeds
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("train"),
    params:
        encoder=lambda wc: vlparams.pretrain_spec(config, wc.encoder),  # only what pretraining reads
        size=config["render"]["size"],
        n_colors=config["render"]["n_colors"],
        precision=vlparams.canonical(config["precision"]),
        device=config["device"],
    script:
        "../../scripts/pretrain_encoder.py"


rule extract_features:
    input:
        objects="results/banks/{layout}/objects.parquet",
        images="results/banks/{layout}/images",
        weights=encoder_weights,
    output:
        features="results/features/{encoder}/{layout}.npy",
        index="results/features/{encoder}/{layout}.json",
    log:
        "results/logs/features/{encoder}/{layout}.log",
    benchmark:
        "results/benchmarks/features/{encoder}/{layout}.tsv"
    priority: 10 + vlstages.chain_below(vlstages.VISION_STAGES[0])  # as the first image stage they feed
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("train"),
    params:
        encoder=lambda wc: vlparams.encoder_spec(config, wc.encoder),
        precision=vlparams.canonical(config["vision"]["precision"]),
        device=config["device"],
    script:
        "../../scripts/extract_features.py"

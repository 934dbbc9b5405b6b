# One rule, one checkpoint per stage of the text curriculum and noise training (appendix D.3-D.4).
# params carry the stage's task, its merged train settings and (first stage) the model: changing any of
# them reruns that stage and, through its checkpoint, every stage after it. Library code is deliberately
# not an input (see README, "What reruns when").


rule train_text:
    input:
        parent=parent_model,
    output:
        model="results/models/seed{seed}/{stage}/model.safetensors",
        meta="results/models/seed{seed}/{stage}/meta.json",
        metrics="results/models/seed{seed}/{stage}/metrics.parquet",
    log:
        "results/logs/train/seed{seed}/{stage}.log",
    benchmark:
        "results/benchmarks/train/seed{seed}/{stage}.tsv"
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["train_threads"]
    resources:
        gpu=config["resources"]["train_gpus"],
        runtime=config["resources"]["train_runtime_min"],
        mem_mb=config["resources"]["train_mem_mb"],
    params:
        stage=lambda wc: vlconfig.stage_params(config, wc.stage),
        device=config["device"],
    script:
        "../../scripts/train.py"

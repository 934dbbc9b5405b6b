# One checkpoint per training stage (appendix D.3-D.7), per seed and, for vision stages, per encoder.
# params carry the stage's task, its merged train settings and what it starts (the model at text_s1, the
# projector at image) or reads (the encoder): changing any of them reruns that stage and, through its
# checkpoint, every stage after it. Library code is deliberately not an input (README, "What reruns when").


rule train_text:
    input:
        unpack(noise_control_twin),
        parent=parent_model,
    output:
        **stage_files(vlparams.TEXT_RUN),
    log:
        f"results/logs/train/{vlparams.TEXT_RUN}/{{stage}}.log",
    benchmark:
        f"results/benchmarks/train/{vlparams.TEXT_RUN}/{{stage}}.tsv"
    wildcard_constraints:
        stage="|".join(s for s in vlstages.TEXT_STAGES if s not in REUSED),
    priority: lambda wc: 10 + vlstages.chain_below(wc.stage)  # training first, the longest chains first
    conda:
        "../envs/vlbind.yaml"
    threads: config["resources"]["threads"]
    resources:
        **job_resources("train"),
    params:
        stage=lambda wc: vlparams.stage_params(config, wc.stage),
        device=config["device"],
    script:
        "../../scripts/train.py"


use rule train_text as train_vision with:
    input:
        unpack(stage_features),
        parent=parent_model,
    output:
        **stage_files(vlparams.VISION_RUN),
    log:
        f"results/logs/train/{vlparams.VISION_RUN}/{{stage}}.log",
    benchmark:
        f"results/benchmarks/train/{vlparams.VISION_RUN}/{{stage}}.tsv"
    wildcard_constraints:
        stage="|".join(vlstages.VISION_STAGES),
    params:
        stage=lambda wc: vlparams.stage_params(config, wc.stage, wc.encoder),
        device=config["device"],


rule reuse_stage:
    """A stage an experiment shares with another results tree (config key `reuse`): its files copied from there, so
    that the stages below it train from the very weights the other tree's did."""
    input:
        **stage_files(vlparams.TEXT_RUN, root=REUSE_TREE),
    output:
        **stage_files(vlparams.TEXT_RUN),
    log:
        f"results/logs/reuse/{vlparams.TEXT_RUN}/{{stage}}.log",
    wildcard_constraints:
        stage="|".join(REUSED) or "^$",
    localrule: True
    conda:
        "../envs/vlbind.yaml"
    shell:
        "cp {input.model} {output.model} && cp {input.meta} {output.meta} && cp {input.metrics} {output.metrics} "
        "&& echo copied {input.model}, {input.meta}, {input.metrics} > {log}"

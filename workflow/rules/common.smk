# Config validation and the helpers rules share. Nothing here imports torch: building the DAG stays cheap.
from vlbind import config as vlconfig

try:
    vlconfig.validate(config)
except vlconfig.ConfigError as e:
    raise WorkflowError(str(e)) from None

SEEDS = config["seeds"]
RUNS = [f"seed{s}" for s in SEEDS]
TEXT_STAGES = list(vlconfig.STAGE_PARENTS)
MODEL_DIR = "results/models/{run}/{stage}"


wildcard_constraints:
    run="seed[0-9]+",
    seed="[0-9]+",
    stage="|".join(TEXT_STAGES),
    variant="|".join(vlconfig.VARIANT_STAGE),


def parent_model(wildcards):
    parent = vlconfig.STAGE_PARENTS[wildcards.stage]
    return [] if parent is None else [f"results/models/seed{wildcards.seed}/{parent}/model.safetensors"]


def variant_model(wildcards):
    stage = vlconfig.VARIANT_STAGE[wildcards.variant]
    return f"results/models/{wildcards.run}/{stage}/model.safetensors"


def eval_tables(wildcards=None):
    return expand("results/eval/{variant}/{run}.parquet", variant=config["variants"], run=RUNS)

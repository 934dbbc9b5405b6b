# Config validation and the helpers rules share. Nothing here imports torch: building the DAG stays cheap.
import vlbind.interp
from vlbind import captions as vlcaptions
from vlbind import config as vlconfig
from vlbind import params as vlparams
from vlbind.core import stages as vlstages

try:
    vlconfig.validate(config)
except vlconfig.ConfigError as e:
    raise WorkflowError(str(e)) from None

REPO = workflow.basedir  # the library's sources, which some rules read as inputs, wherever the working directory is
SEEDS = config["seeds"]
REUSED = config["reuse"]["stages"]  # stages copied from another results tree (rule reuse_stage), not trained
REUSE_TREE = config["reuse"]["tree"]
ENCODERS = config["vision"]["encoders"]
LAYOUT = config["render"]["layout"]
BANK = f"results/banks/{LAYOUT}"


def job_resources(kind):
    """What a job asks a scheduler for, by kind: "train" (training, encoder pretraining, feature extraction: a GPU,
    config key resources' time and memory), "gpu" (evaluation, analyses: a GPU, the profile's default time and
    memory), "qwen" (a pretrained LLM or VLM: a GPU, qwen's time and memory)."""
    gpu = {"gpu": config["resources"]["gpus"]}
    if kind == "train":
        return gpu | {
            "runtime": config["resources"]["train_runtime_min"],
            "mem_mb": config["resources"]["train_mem_mb"],
        }
    if kind == "qwen":
        return gpu | {"runtime": config["qwen"]["runtime_min"], "mem_mb": config["qwen"]["mem_mb"]}
    return gpu


def figure_outputs(figs, category):
    """Named outputs of a job that draws several figures: results/figures/{fig}.pdf each, in the report under
    `category` with its own caption, workflow/report/{fig}.rst."""
    return {
        fig: report(f"results/figures/{fig}.pdf", caption=f"../report/{fig}.rst", category=category) for fig in figs
    }


wildcard_constraints:
    seed="[0-9]+",
    run="seed[0-9]+(-[A-Za-z0-9_]+)?",
    encoder="[A-Za-z0-9_]+",
    layout="per_object|canvas",
    variant="|".join(vlstages.VARIANT_STAGE),


# a stage's files, the one statement of where a checkpoint lives: results/models/{run}/{stage}/ (params.run_name)
STAGE_FILES = {"model": "model.safetensors", "meta": "meta.json", "metrics": "metrics.parquet"}


def stage_files(run, root="results"):
    """The three files a training rule writes (or reuse_stage copies), for a run pattern (vlparams.TEXT_RUN,
    vlparams.VISION_RUN) and the stage wildcard, under `root`."""
    return {k: f"{root}/models/{run}/{{stage}}/{name}" for k, name in STAGE_FILES.items()}


def model_file(seed, stage, encoder=None, name=STAGE_FILES["model"]):
    return f"results/models/{vlparams.run_name(seed, stage, encoder)}/{stage}/{name}"


def parent_model(wildcards):
    parent = vlstages.STAGE_PARENTS[wildcards.stage]
    if parent is None:
        return []
    return [model_file(wildcards.seed, parent, wildcards.get("encoder"))]


def noise_control_twin(wildcards):
    """The meta.json of the stage a noise control trains as long as (vlbind.core.stages.NOISE_CONTROL), named `twin`
    (for unpack()); none for other stages."""
    twin = vlstages.NOISE_CONTROL.get(wildcards.stage)
    return {"twin": model_file(wildcards.seed, twin, name="meta.json")} if twin else {}


def stage_features(wildcards):
    """The image bank a vision stage reads, if its prompts have image contexts: features, their index and
    the object table (named inputs, for unpack())."""
    if not vlparams.uses_images(config, wildcards.stage):
        return {}
    features = f"results/features/{wildcards.encoder}/{LAYOUT}"
    return {"features": f"{features}.npy", "index": f"{features}.json", "objects": f"{BANK}/objects.parquet"}


def encoder_weights(wildcards):
    """The weights file the DAG pretrains for an encoder with a `pretrain` section (none for the others)."""
    if config["encoders"][wildcards.encoder].get("pretrain") is None:
        return []
    return [vlparams.pretrained_encoder_file(wildcards.encoder)]


def variant_model(wildcards):
    seed, encoder = vlparams.parse_run(wildcards.run)
    return model_file(seed, vlstages.VARIANT_STAGE[wildcards.variant], encoder)


def variant_lineage(name):
    """Input function: file `name` (metrics.parquet, meta.json) of every stage a variant's model descends from,
    in training order (for the divergence rule)."""

    def files(wildcards):
        seed, encoder = vlparams.parse_run(wildcards.run)
        stages = vlstages.lineage(vlstages.VARIANT_STAGE[wildcards.variant])
        return [model_file(seed, s, encoder, name) for s in stages]

    return files


def eval_tables(wildcards=None, variants=None):
    """The evaluation tables of every run of `variants` (default: the configured variants)."""
    return [
        f"results/eval/{v}/{run}.parquet"
        for v in (config["variants"] if variants is None else variants)
        for run in vlparams.variant_runs(config, v)
    ]


def all_meta():
    """meta.json of every stage the configured variants need."""
    paths = set()
    for v in config["variants"]:
        for run in vlparams.variant_runs(config, v):
            seed, encoder = vlparams.parse_run(run)
            stages = vlstages.lineage(vlstages.VARIANT_STAGE[v])
            paths |= {model_file(seed, s, encoder, "meta.json") for s in stages}
    return sorted(paths)


ANALYSES = list(vlbind.interp.ANALYSES)
# figure -> the analysis whose tables it draws (names of the paper's figures; layer relevance is ours)
INTERP_FIGURES = {fig: analysis for analysis, figs in vlbind.interp.ANALYSES.items() for fig in figs}


def interp_tables(analysis):
    return [
        f"results/interp/{analysis}/{v}/{run}.parquet"
        for v in config["interp"]["variants"]
        for run in vlparams.variant_runs(config, v)
    ]


# Pretrained Qwen models (workflow/rules/qwen.smk)
QWEN = config["qwen"]
QWEN_NOTE = "TINY RANDOM Qwen models (not the real weights): numbers are meaningless" if QWEN["tiny"] else ""
# the params every Qwen model job passes its script: the model's section and how to load and prompt it
QWEN_MODEL_PARAMS = {
    "model": lambda wc: vlparams.canonical(QWEN["models"][wc.model]),
    "chat": vlparams.canonical(QWEN["chat"]),
    "tiny": QWEN["tiny"],
    "dtype": QWEN["dtype"],
    "device": config["device"],
}


def qwen_tables(wildcards=None):
    return expand("results/qwen/retrieval/{model}/{task}.parquet", model=QWEN["models"], task=["direct", "indirect"])

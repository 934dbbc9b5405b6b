"""What the rules read of a validated config (vlbind.config): a stage's section, derived for the controls, its merged
train settings and its params (`stage_params`: what a training rule's params hold, so that a changed value reruns that
stage and its descendants only); a section's params without its speed-only settings (`result_params`) and what a job
builds its settings from (`job_section`); the encoders' specs; the run patterns and names. Imports no torch, so the
Snakefile can use it.
"""

from __future__ import annotations

import copy

from vlbind.core.schema import marked as schema_marked
from vlbind.core.schema import schema_defaults
from vlbind.core.settings import ConfigError
from vlbind.core.stages import CONTROLS, CURRICULUM, NOISE_CONTROL, STAGE_PARENTS, VARIANT_STAGE, VISION_STAGES


def stage_section(config: dict, stage: str) -> dict:
    """A stage's section of `stages` with its whole task: the top-level `task` with the stage's own on top (as
    `train`, stage_train). Derived for the controls (never written into `config`): a binding-loss control's task is
    its parent's (CONTROLS), a curriculum-control stage's section its image stage's with image_fraction 0 in the task
    and the start task (CURRICULUM), a noise control's its twin's on its parent's task (NOISE_CONTROL)."""
    if stage in CONTROLS:
        return {**config["stages"][stage], "task": control_task(config, stage)}
    if stage in NOISE_CONTROL:  # its twin's settings on its parent's task, the noise left out
        twin = copy.deepcopy(stage_section(config, NOISE_CONTROL[stage]))
        return {**twin, "task": stage_section(config, STAGE_PARENTS[stage])["task"]}
    if stage not in CURRICULUM:
        section = config["stages"][stage]
        return {**section, "task": {**config["task"], **(section.get("task") or {})}}
    section = copy.deepcopy(stage_section(config, CURRICULUM[stage]))
    section["task"]["image_fraction"] = 0.0
    if section.get("start"):
        section["start"]["task"].pop("image_fraction", None)
    return section


def control_task(config: dict, control: str) -> dict:
    """A binding-loss control's task: its text parent's (`shuffle` on for text_bind_shuffled)."""
    task = stage_section(config, STAGE_PARENTS[control])["task"]
    return {**task, "shuffle": True} if control.endswith("_shuffled") else task


def stage_train(config: dict, stage: str) -> dict:
    """The train settings of one stage, every key: the schema's defaults of the keys a config may leave out, the
    top-level `train` section on top, the stage's own `train` on top of that, the top-level `precision`
    (TrainConfig.precision) and `divergence.stall_margin` (TrainConfig.stall_margin). A reader asks it for any key,
    with no fallback of its own (the schema is the defaults' one home)."""
    train = deep_merge(config["train"], stage_section(config, stage).get("train", {}))
    return {**schema_defaults("train"), **train, "precision": config["precision"],
            "stall_margin": config["divergence"]["stall_margin"]}


def deep_merge(base: dict, overlay: dict) -> dict:
    """`overlay` on a copy of `base`, mappings merged key by key (config files left to right: config.load; a stage's
    train section on the global one: stage_train)."""
    out = copy.deepcopy(base)
    for k, v in (overlay or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def stage_params(config: dict, stage: str, encoder: str | None = None) -> dict:
    """Everything that determines one stage's training: its task, its merged train settings, its start task
    if it has one, for the first stage the model architecture, for the first image stage the projector, and
    for stages that read image features the encoder. Passed as a rule's params, so a change reruns exactly this stage
    and its descendants."""
    if stage not in STAGE_PARENTS:
        raise ConfigError(f"unknown stage {stage!r}; valid: {sorted(STAGE_PARENTS)}")
    section = stage_section(config, stage)
    from vlbind.data.spec import StageSpec
    from vlbind.training.config import TrainConfig

    train = _beside_defaults(stage_train(config, stage), "train")
    if train["stall_margin"] == TrainConfig.stall_margin:  # config.yaml's: the rule's margin since it came (0.05)
        del train["stall_margin"]
    params = {"stage": stage, "parent": STAGE_PARENTS[stage], "task": _beside_defaults(section["task"], "task"),
              "train": train}
    judged = StageSpec.from_dict(section["task"]).for_validation().judged
    if judged is not None:  # the part of validation the stop rules read (train.Validation): a stage made before
        params["val_judged"] = judged  # they read one trained on the mixed accuracy, so it reruns
    if section.get("start"):
        params["start"] = {"steps": section["start"]["steps"],
                           "task": _beside_defaults({**section["task"], **section["start"]["task"]}, "task")}
    if STAGE_PARENTS[stage] is None:
        params["model"] = dict(config["model"])
    if stage == VISION_STAGES[0]:
        params["projector"] = dict(config["projector"])
    if uses_images(config, stage):
        params["encoder"] = encoder_spec(config, encoder)
    if stage in NOISE_CONTROL:  # its steps and lr: at run time, from its twin's meta.json (attempts.as_long_as)
        params["as_long_as"] = NOISE_CONTROL[stage]
    return canonical(params)


def _beside_defaults(section: dict, definition: str) -> dict:
    """`section` without the keys at their schema default, so that a setting added to vlbind later, whose
    default keeps the old behaviour, changes no stage's params and reruns nothing."""
    defaults = schema_defaults(definition)
    return {k: v for k, v in section.items() if k not in defaults or v != defaults[k]}


def uses_images(config: dict, stage: str) -> bool:
    from vlbind.data.spec import StageSpec  # the one default of image_fraction (spec.StageSpec: why there)

    return stage_section(config, stage)["task"].get("image_fraction", StageSpec.image_fraction) > 0


def canonical(value):
    """A copy with every mapping's keys sorted. Rule params pass through this: Snakemake compares params as
    written, so the same settings merged from overlays in another order would otherwise count as a change
    and rerun the job."""
    if isinstance(value, dict):
        return {k: canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [canonical(v) for v in value]
    return value


# Settings that set memory and speed only (`speed_only: true` in the schema): out of every rule's params, so that
# changing one reruns nothing (a result equal to rounding: tests/test_workflow.py); a job reads them from the config
# itself (`speed_settings`).
SPEED_ONLY = schema_marked("speed_only")


def section_at(config: dict, path: str) -> dict:
    """The section at dotted config key `path` ("qwen.generation")."""
    for part in path.split("."):
        config = config[part]
    return config


def result_params(config: dict, path: str) -> dict:
    """The section at `path` (e.g. "qwen.generation") as a rule's params: canonical, without the settings that set
    memory and speed only (SPEED_ONLY)."""
    return canonical({k: v for k, v in section_at(config, path).items() if k not in SPEED_ONLY.get(path, ())})


def speed_settings(config: dict, path: str) -> dict:
    """The memory and speed settings of the section at `path`, which result_params leaves out."""
    return {k: section_at(config, path)[k] for k in SPEED_ONLY[path]}


def job_section(params: dict, config: dict, path: str) -> dict:
    """What a job builds its settings from: the rule's `params` (result_params) and the config's speed settings."""
    return {**params, **speed_settings(config, path)}


def encoder_spec(config: dict, name: str) -> dict:
    """The encoder's section; one with a `pretrain` section loads the weights the DAG pretrains for it."""
    if name not in config["encoders"]:
        raise ConfigError(f"unknown encoder {name!r}; configured under 'encoders': {sorted(config['encoders'])}")
    spec = dict(config["encoders"][name])
    if spec.get("pretrain") is not None:
        spec.update(pretrained=True, checkpoint=pretrained_encoder_file(name))
    return canonical(spec)


PRETRAIN_READS = ("timm_name", "model_kwargs", "pretrain")  # what pretraining an encoder reads of its section


def pretrain_spec(config: dict, name: str) -> dict:
    """What rule pretrain_encoder reads of encoder `name`'s section, and nothing else, so that a change elsewhere in
    it (`grid`, say: how features are pooled) re-extracts features without pretraining the encoder again."""
    spec = encoder_spec(config, name)
    return {k: spec[k] for k in PRETRAIN_READS if k in spec}


def pretrained_encoder_file(name: str) -> str:
    """Where the pretrain_encoder rule writes encoder `name`'s weights."""
    return f"results/encoders/{name}.safetensors"


# A run's directory under results/models/ (and logs/, benchmarks/): one per seed for the text stages, per seed and
# encoder for the vision stages. The one home of both patterns: the rules write them with wildcards, run_name fills
# them in, parse_run reads one back.
TEXT_RUN, VISION_RUN = "seed{seed}", "seed{seed}-{encoder}"


def run_name(seed: int, stage: str, encoder: str | None = None) -> str:
    """The run directory a stage's checkpoint lives in: TEXT_RUN or, for vision stages, VISION_RUN filled in."""
    return (VISION_RUN if stage in VISION_STAGES else TEXT_RUN).format(seed=seed, encoder=encoder)


def variant_runs(config: dict, variant: str) -> list[str]:
    """Run ids of a variant: one per seed (all of `seeds`, or those `variant_seeds` gives it), and per encoder for
    image-trained variants."""
    seeds = config["variant_seeds"].get(variant, config["seeds"])
    stage = VARIANT_STAGE[variant]
    encoders = config["vision"]["encoders"] if stage in VISION_STAGES else [None]
    return [run_name(s, stage, e) for s in seeds for e in encoders]


def parse_run(run: str) -> tuple[int, str | None]:
    """'seed3-vit_b16' -> (3, 'vit_b16'); 'seed3' -> (3, None)."""
    head, _, encoder = run.partition("-")
    return int(head.removeprefix("seed")), encoder or None

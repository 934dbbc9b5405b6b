"""Loading and validating config/config.yaml and its overlays (never changing them), and reading what its layout
nests: each stage's section (derived for the controls) and what a training rule needs (`stage_params`), the
encoders' specs, run names. Imports no torch, so the Snakefile can use it. Caption text: `captions`.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from vlbind.core.schema import marked as schema_marked
from vlbind.core.schema import schema, schema_defaults
from vlbind.core.settings import (  # ConfigError defined on the bottom floor so every module can raise it
    ConfigError,
    read_yaml,
)
from vlbind.core.stages import (
    CONTROLS,
    CURRICULUM,
    NOISE_CONTROL,
    STAGE_PARENTS,
    TEXT_STAGES,
    VARIANT_STAGE,
    VISION_STAGES,
)
from vlbind.core.vocab import SHAPES

# Keys that were renamed: dotted old path -> the new key (`*` = any name, the same in both). A config holding an
# old key fails naming the new one, not with the schema's "additional properties" message.
RENAMED = {
    **{f"stages.*.{where}.{old}_pairs": f"stages.*.{where}.{old}_objects" for where in ("task", "start.task")
       for old in ("min", "max")},
    "resources.train_threads": "resources.threads",
    "resources.train_gpus": "resources.gpus",
    "qwen.prompts.system_prompt": "qwen.chat.system_prompt",
    "qwen.generation.thinking": "qwen.chat.thinking",
    "train.precision": "precision",  # top level: it sets evaluation and the analyses too
    "stages.*.train.precision": "precision",
    "qwen.probes.ridge": "qwen.probes.ridges",  # penalties the cross-validation chooses from
    # "variants" names the models (config `variants`); renderings per color-shape pair are renderings
    "render.variants": "render.renderings",
    "encoders.*.pretrain.variants": "encoders.*.pretrain.renderings",
}


def _check_renamed(config: dict) -> None:
    def walk(node, path):
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            here = [*path, str(key)]
            for old, new in RENAMED.items():
                pattern = old.split(".")
                if len(pattern) == len(here) and all(p in ("*", h) for p, h in zip(pattern, here)):
                    new_key = ".".join(here[i] if part == "*" else part for i, part in enumerate(new.split(".")))
                    raise ConfigError(f"config key '{'.'.join(here)}' was renamed: use '{new_key}'")
            walk(value, here)

    walk(config, [])


def deep_merge(base: dict, overlay: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in (overlay or {}).items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def validate(config: dict) -> dict:
    """Check `config` against the schema; raise ConfigError naming the offending key."""
    import jsonschema

    _check_renamed(config)
    for stage, image_stage in CURRICULUM.items():
        if stage in config.get("stages", {}):
            raise _error(f"stages.{stage}", f"the curriculum control copies stages.{image_stage} with every context "
                         f"in text (vlbind.core.stages.CURRICULUM); set stages.{image_stage} instead")
    for stage, twin in NOISE_CONTROL.items():
        if stage in config.get("stages", {}):
            raise _error(f"stages.{stage}", f"the noise control trains stages.{STAGE_PARENTS[stage]}'s task with "
                         f"stages.{twin}'s settings for as long as {twin} trained (vlbind.core.stages.NOISE_CONTROL); "
                         f"set those stages instead")
    parsed = schema()
    errors = sorted(jsonschema.Draft7Validator(parsed).iter_errors(config), key=lambda e: list(e.absolute_path))
    if errors:
        e = errors[0]
        where = ".".join(str(p) for p in e.absolute_path) or "<top level>"
        hint = ""
        if e.validator == "required":
            hint = " (an overlay such as config/mini.yaml goes after config/config.yaml)"
        raise ConfigError(f"invalid config at '{where}': {e.message}{hint}")
    # What the schema cannot say: relations between keys. Each check raises ConfigError naming the key.
    missing = set(STAGE_PARENTS) - set(CURRICULUM) - set(NOISE_CONTROL) - set(config["stages"])
    if missing:
        raise _error("stages", f"missing stages {sorted(missing)}")
    _check_controls(config)
    specs = _stage_specs(config)
    _check_stages(config, specs)
    _check_model(config, specs)
    _check_ranges(config)
    _check_encoders(config)
    _check_reuse(config)
    _check_stall_windows(config)
    return config


def _check_stall_windows(config: dict) -> None:
    """A stage with retries must let the stall rule fire before its cap, else a stalled attempt runs to the cap and
    leaves its retry nothing (training.attempts): the window opens at the first validation, or the start phase's last,
    and fires `stall_steps` later."""
    from vlbind.training.config import TrainConfig

    for stage in set(STAGE_PARENTS) - set(NOISE_CONTROL):  # a noise control trains one attempt
        cfg = TrainConfig.from_section(stage_train(config, stage), seed=0, device="cpu", precision="fp32")
        if cfg.attempts == 1 or cfg.pass_bar is None or cfg.stall_steps is None or cfg.max_steps == 0:
            continue
        start, every = (stage_section(config, stage).get("start") or {}).get("steps", 0), cfg.eval_every
        opens = max(every, start - start % every)
        fires = opens + cfg.stall_steps
        if fires >= cfg.max_steps:
            key = f"stages.{CURRICULUM.get(stage, stage)}.train.max_steps"
            raise _error(key, f"{cfg.max_steps} leaves no room for the stall rule of stage {stage}: its window "
                         f"of train.stall_steps={cfg.stall_steps} steps opens at step {opens} (the first "
                         f"validation{' after the start phase' if start else ''}) and ends at {fires}, so "
                         f"no attempt would stall and a retry would get no steps; valid: max_steps above {fires}, or "
                         "train.stall_steps null (no stall rule) or train.attempts 1 (no retry)")


def _check_reuse(config: dict) -> None:
    reuse = config.get("reuse") or {}
    bad = [s for s in reuse.get("stages", []) if s not in TEXT_STAGES]
    if bad:
        raise _error("reuse.stages", f"{bad} are not text stages; valid: {list(TEXT_STAGES)}")
    if reuse.get("stages") and not reuse.get("tree"):
        raise _error("reuse.tree", "reuse.stages is set, but not the results tree to copy them from")


def _error(key: str, problem: str) -> ConfigError:
    return ConfigError(f"invalid config at '{key}': {problem}")


def _stage_specs(config: dict) -> dict:
    """{config key: StageSpec} of every stage's task and start task; a task the library rejects is an error
    at that key."""
    from vlbind.data.spec import StageSpec

    specs = {}
    for name in STAGE_PARENTS:
        stage = stage_section(config, name)
        tasks = {f"stages.{name}.task": stage["task"]}
        if stage.get("start"):
            tasks[f"stages.{name}.start.task"] = {**stage["task"], **stage["start"]["task"]}
        for key, task in tasks.items():
            try:
                specs[key] = StageSpec.from_dict(task)
            except ValueError as e:
                raise _error(key, str(e)) from None
    return specs


def _check_stages(config: dict, specs: dict) -> None:
    rendered = {"n_colors": config["render"]["n_colors"], "n_shapes": len(SHAPES)}
    for key, spec in specs.items():
        if spec.image_fraction == 0:
            continue
        stage = key.split(".")[1]
        if stage not in VISION_STAGES:
            raise _error(f"{key}.image_fraction", f"only the stages {list(VISION_STAGES)} may use image contexts")
        for n, have in rendered.items():
            if getattr(spec, n) > have:
                raise _error(f"{key}.{n}", f"{getattr(spec, n)} is more than the image bank renders ({have}; "
                             f"colors: render.n_colors, shapes: the {len(SHAPES)} of vlbind.core.vocab.SHAPES)")


def _control_task(config: dict, control: str) -> dict:
    """A binding-loss control's task: its text parent's (`shuffle` on for text_bind_shuffled)."""
    task = stage_section(config, STAGE_PARENTS[control])["task"]
    return {**task, "shuffle": True} if control.endswith("_shuffled") else task


def _check_controls(config: dict) -> None:
    """A binding-loss control is its text parent plus the image arm's binding loss and nothing else: a task
    written for it must be its parent's (stage_section derives it), its binding loss the image arm's."""
    for control, image_stage in CONTROLS.items():
        given = config["stages"][control].get("task")
        if given is not None and given != _control_task(config, control):
            raise _error(f"stages.{control}.task", f"is stages.{STAGE_PARENTS[control]}.task"
                         f"{' with shuffle: true' if control.endswith('_shuffled') else ''}; set it there")
        weight, image_weight = (stage_train(config, s)["binding_loss"] for s in (control, image_stage))
        if weight != image_weight:
            raise _error(f"stages.{control}.train.binding_loss", f"{weight} must equal the image arm's weight "
                         f"(stages.{image_stage}: {image_weight}), the aid the control gives the text arm")


def _check_model(config: dict, specs: dict) -> None:
    from vlbind.data.tasks import max_position

    m = config["model"]
    if m["d_model"] % m["n_heads"] or (m["d_model"] // m["n_heads"]) % 2:
        raise _error("model.d_model", f"{m['d_model']} must split into n_heads={m['n_heads']} heads of even size "
                     f"(RoPE rotates pairs of dimensions): a multiple of {2 * m['n_heads']}")
    need = {key: max_position(s.max_objects, s.noise_tokens if s.noise_fraction > 0 else 0)
            for key, s in specs.items()}
    need["evaluate.max_objects"] = max_position(config["evaluate"]["max_objects"], 0)
    where, top = max(need.items(), key=lambda kv: kv[1])
    if m["max_positions"] <= top:
        raise _error("model.max_positions", f"{m['max_positions']} is too small: {where} needs position ids up to "
                     f"{top} (text prompts, noise included); set it to at least {top + 1}")


def _check_ranges(config: dict) -> None:
    pairs = [("render", "min_scale", "max_scale"), ("render", "min_objects", "max_objects"),
             ("evaluate", "min_objects", "max_objects"), ("evaluate", "train_max_objects", "max_objects")]
    pairs += [(f"encoders.{name}.pretrain", "min_scale", "max_scale")
              for name, enc in config["encoders"].items() if enc.get("pretrain")]
    for section, lo, hi in pairs:
        values = _section(config, section)
        if lo in values and hi in values and values[lo] > values[hi]:
            raise _error(f"{section}.{lo}", f"{values[lo]} > {section}.{hi} ({values[hi]})")
    from vlbind.data.render import RenderConfig

    try:  # the rest of what the renderer accepts (e.g. canvas objects within the distinct colors)
        RenderConfig.from_dict(config["render"])
    except ValueError as e:
        raise _error("render", str(e)) from None
    seeds = config["seeds"]
    if len(set(seeds)) != len(seeds):
        raise _error("seeds", f"{seeds} lists a seed twice; each seed is one run")
    for variant, subset in config["variant_seeds"].items():
        if not set(subset) <= set(seeds):
            raise _error(f"variant_seeds.{variant}", f"{subset} must be seeds of `seeds` ({seeds})")


def _check_encoders(config: dict) -> None:
    unknown = set(config["vision"]["encoders"]) - set(config["encoders"])
    if unknown:
        raise _error("vision.encoders", f"{sorted(unknown)} not defined under 'encoders' (defined: "
                     f"{sorted(config['encoders'])})")
    for name, encoder in config["encoders"].items():
        if encoder.get("pretrain") is not None and encoder.get("checkpoint") is not None:
            raise _error(f"encoders.{name}", "set either 'pretrain' (the DAG trains the weights) or 'checkpoint' "
                         "(a weights file you provide), not both")



def load(paths: list[str | Path]) -> dict:
    """Merge config files left to right (later overlays win), then validate."""
    config: dict = {}
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise ConfigError(f"config file {p} does not exist")
        try:
            overlay = read_yaml(p.read_text()) or {}
        except yaml.YAMLError as e:  # its message gives line and column
            raise ConfigError(f"config file {p} is not valid YAML: {e}") from None
        if not isinstance(overlay, dict):
            raise ConfigError(f"config file {p} holds a {type(overlay).__name__}, not a mapping of config keys")
        config = deep_merge(config, overlay)
    return validate(config)


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


def _section(config: dict, path: str) -> dict:
    for part in path.split("."):
        config = config[part]
    return config


def result_params(config: dict, path: str) -> dict:
    """The section at `path` (e.g. "qwen.generation") as a rule's params: canonical, without the settings that set
    memory and speed only (SPEED_ONLY)."""
    return canonical({k: v for k, v in _section(config, path).items() if k not in SPEED_ONLY.get(path, ())})


def speed_settings(config: dict, path: str) -> dict:
    """The memory and speed settings of the section at `path`, which result_params leaves out."""
    return {k: _section(config, path)[k] for k in SPEED_ONLY[path]}


def job_section(params: dict, config: dict, path: str) -> dict:
    """What a job builds its settings from: the rule's `params` (result_params) and the config's speed settings."""
    return {**params, **speed_settings(config, path)}


def stage_section(config: dict, stage: str) -> dict:
    """A stage's section of `stages` with its whole task: the top-level `task` with the stage's own on top (as
    `train`, stage_train). Derived for the controls (never written into `config`): a binding-loss control's task is
    its parent's (CONTROLS), a curriculum-control stage's section its image stage's with image_fraction 0 in the task
    and the start task (CURRICULUM), a noise control's its twin's on its parent's task (NOISE_CONTROL)."""
    if stage in CONTROLS:
        return {**config["stages"][stage], "task": _control_task(config, stage)}
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


def stage_train(config: dict, stage: str) -> dict:
    """The train settings of one stage, every key: the schema's defaults of the keys a config may leave out, the
    top-level `train` section on top, the stage's own `train` on top of that, the top-level `precision`
    (TrainConfig.precision) and `divergence.stall_margin` (TrainConfig.stall_margin). A reader asks it for any key,
    with no fallback of its own (the schema is the defaults' one home)."""
    train = deep_merge(config["train"], stage_section(config, stage).get("train", {}))
    return {**schema_defaults("train"), **train, "precision": config["precision"],
            "stall_margin": config["divergence"]["stall_margin"]}


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

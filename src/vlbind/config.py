"""Loading and validating config/config.yaml and its overlays (never changing them): the schema's checks, then the
relations between keys it cannot state, each error naming its key. What the rules read of a validated config (a
stage's params, run names, the encoders' specs): `vlbind.params`. Imports no torch, so the Snakefile can use it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from vlbind.core.schema import schema
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
    VISION_STAGES,
)
from vlbind.core.vocab import SHAPES
from vlbind.params import control_task, deep_merge, section_at, stage_section, stage_train

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


def _check_controls(config: dict) -> None:
    """A binding-loss control is its text parent plus the image arm's binding loss and nothing else: a task
    written for it must be its parent's (stage_section derives it), its binding loss the image arm's."""
    for control, image_stage in CONTROLS.items():
        given = config["stages"][control].get("task")
        if given is not None and given != control_task(config, control):
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
        values = section_at(config, section)
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

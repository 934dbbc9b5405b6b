"""The config schema (`config.schema.yaml`): its parsed form, with the stage and variant names filled in from
vlbind.core.stages, and the defaults of the settings a config may leave out, the one home of those values (the task
and train dataclasses read them here). Below `config` and `tasks`, so both can use it; no torch."""

from __future__ import annotations

import functools
from pathlib import Path

from vlbind.core.settings import read_yaml
from vlbind.core.stages import CONTROLS, CURRICULUM, NOISE_CONTROL, STAGE_PARENTS, VARIANT_STAGE
from vlbind.core.vocab import SHAPES, WEB_SAFE, Vocab

SCHEMA_PATH = Path(__file__).parents[1] / "config.schema.yaml"


@functools.cache
def schema() -> dict:
    """The parsed schema, read once per process: stage_params runs for every training job at DAG build.
    Shared, so read it, never change it. The names come from vlbind.core.stages, their one declaration: the variants'
    enum (VARIANT_STAGE) and a section per stage (STAGE_PARENTS; a control_stage for CONTROLS, none for the
    curriculum control's, which copy their image stage's, nor for the noise control's, NOISE_CONTROL)."""
    parsed = read_yaml(SCHEMA_PATH.read_text())
    parsed["definitions"]["variant"]["enum"] = list(VARIANT_STAGE)
    for key in ("n_colors", "n_shapes", "n_items"):  # a stage draws from the first n of the vocabulary's group
        parsed["definitions"]["task"]["properties"][key]["maximum"] = getattr(Vocab, key)
    parsed["properties"]["model"]["properties"]["vocab_size"]["minimum"] = len(Vocab())  # every id embedded
    for section in (parsed["definitions"]["task"], parsed["properties"]["evaluate"]):  # an object binds its own item
        for key in ("min_objects", "max_objects"):
            section["properties"][key]["maximum"] = Vocab.n_items
    render = parsed["properties"]["render"]["properties"]
    render["n_colors"]["maximum"] = len(WEB_SAFE)
    for key in ("min_objects", "max_objects"):  # a canvas shows each shape once
        render[key]["maximum"] = len(SHAPES)
    parsed["properties"]["stages"]["properties"] = {
        s: {"$ref": "#/definitions/control_stage" if s in CONTROLS else "#/definitions/stage"}
        for s in STAGE_PARENTS if s not in CURRICULUM and s not in NOISE_CONTROL}
    return parsed


def schema_defaults(path: str) -> dict:
    """{key: default} for the keys of the section at config key `path` ("task", "train", "encoders.*") that declare
    one: the one default of a setting a config may leave out (mostly one not in the paper: the value that keeps it
    off)."""
    return {k: p["default"] for k, p in section_schema(path).get("properties", {}).items() if "default" in p}


def section_schema(path: str) -> dict:
    """The schema of config key `path`, dotted, `*` for an entry of a mapping ("qwen.binding",
    "encoders.*.pretrain"); references followed, so "task" and "train" give their definitions."""
    node = schema()
    for part in path.split("."):
        node = _followed(node)
        node = node["additionalProperties"] if part == "*" else node["properties"][part]
    return _followed(node)


def marked(keyword: str) -> dict[str, tuple[str, ...]]:
    """{section path: its keys} of the settings whose schema entry holds `keyword: true` (e.g. `speed_only`, the
    settings of memory and speed: vlbind.params.SPEED_ONLY), sections dotted as config keys ("qwen.generation")."""
    found: dict[str, tuple[str, ...]] = {}

    def walk(node: dict, path: str) -> None:
        for key, entry in _followed(node).get("properties", {}).items():
            entry = _followed(entry)
            if entry.get(keyword) is True:
                found[path] = (*found.get(path, ()), key)
            walk(entry, f"{path}.{key}" if path else key)

    walk(schema(), "")
    return found


def reference() -> list[tuple[str, dict]]:
    """Every setting a config may write, as (dotted key, its schema entry: `description`, `source`, ...), in the
    schema's order: `<name>` for an entry of a mapping (an encoder, a Qwen model), `<stage>` for a stage; the `task`
    and `train` sections a stage overrides listed once, as task.* and train.* (config/README.md's table, written by
    `python -m vlbind config-reference`)."""
    found = []

    def walk(node: dict, path: list[str]) -> None:
        if path[:1] == ["stages"] and node.get("$ref", "").rsplit("/", 1)[-1] in ("task", "train"):
            return
        node = _followed(node)
        if path == ["stages"]:
            walk(schema()["definitions"]["stage"], ["stages", "<stage>"])
        elif "properties" in node:
            for key, entry in node["properties"].items():
                walk(entry, [*path, key])
        elif isinstance(node.get("additionalProperties"), dict):
            walk(node["additionalProperties"], [*path, "<name>"])
        else:
            found.append((".".join(path), node))

    walk(schema(), [])
    return found


def _followed(node: dict) -> dict:
    while "$ref" in node:
        node = schema()["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


@functools.cache
def _field_validators(path: str) -> dict:
    import jsonschema

    return {k: jsonschema.Draft7Validator(p) for k, p in section_schema(path)["properties"].items()}


def check_fields(path: str, owner: object) -> None:
    """Check a settings dataclass against the schema of config key `path` ("task", "train", "render",
    "encoders.*.pretrain"): the one statement of each key's type and range, for configs and for dataclasses built in
    code alike. Raises ValueError naming `Class.key=value` and what would be valid; fields the section lacks (or holds
    as a per-device table) are the dataclass's own to check, as are relations between fields."""
    import jsonschema

    for key, validator in _field_validators(path).items():
        if "properties" in validator.schema or not hasattr(owner, key):
            continue
        value = getattr(owner, key)
        value = list(value) if isinstance(value, tuple) else value  # a config's list, frozen
        if (error := jsonschema.exceptions.best_match(validator.iter_errors(value))) is not None:
            raise ValueError(f"{type(owner).__name__}.{key}={value!r}: {error.message}")

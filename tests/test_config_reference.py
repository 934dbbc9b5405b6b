"""config/README.md, the table of every config key, cannot drift from the schema and the config files."""

import json
import re
from pathlib import Path

import pytest
import yaml

from vlbind import config as vlconfig
from vlbind.core import schema as vlschema

ROOT = Path(__file__).resolve().parents[1]
SOURCES = {"[paper]", "[assumption]", "[changed]", "[ours]", "[tool]"}


def schema_keys() -> list[str]:
    """Every leaf key of the schema, as the table lists it (core.schema.reference; that it misses none a config writes:
    test_every_key_a_config_file_writes_has_a_row)."""
    return [key for key, _ in vlschema.reference()]


def value(config: dict, key: str) -> str:
    """The table's rendering of `key`'s value in `config`: JSON in backticks, or 'per entry'."""
    node = config
    for part in key.split("."):
        if part.startswith("<"):
            return "per entry"
        node = node[part]
    return f"`{json.dumps(node)}`"


def effective(config: dict, key: str) -> str:
    """`key`'s value in `config`, or, left out, the default the schema gives it ("—": none, the key is off)."""
    try:
        return value(config, key)
    except KeyError:
        section, _, name = key.partition(".")
        default = vlschema.schema_defaults(section).get(name, KeyError) if section in ("task", "train") else KeyError
        return "—" if default is KeyError else f"`{json.dumps(default)}`"


def table_rows() -> dict[str, list[str]]:
    rows = {}
    for line in (ROOT / "config/README.md").read_text().splitlines():
        m = re.match(r"\| `([^`]+)` \|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = [c.strip() for c in m.group(2).split("|")]
    return rows


def test_no_schema_entry_lost_part_of_its_text_to_a_comma():
    """An unquoted comma in a YAML flow mapping splits a description into a stray null-valued key."""
    stray = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                if v is None and k != "default":  # a nullable setting's default is null
                    stray.append(".".join([*path, str(k)]))
                walk(v, [*path, str(k)])

    walk(vlschema.schema(), [])
    assert not stray


def test_every_key_a_config_file_writes_has_a_row():
    """Walked from the config files, not the schema: every key config.yaml, mini.yaml and smoke.yaml write is a key of
    the table (a stage's task and train keys as task.* and train.*, named entries as <name> / <stage>)."""
    keys = set(schema_keys())
    prefixes = {".".join(k.split(".")[:i]) for k in keys for i in range(1, k.count(".") + 1)}

    def walk(node: dict, path: list[str]) -> None:
        for key, value in node.items():
            if path[:1] == ["stages"] and key in ("task", "train"):
                here = [key]  # a stage's own task and train keys: those of the top-level sections
            else:
                here = next(([*path, part] for part in (str(key), "<name>", "<stage>")
                             if ".".join([*path, part]) in keys | prefixes), None)
            assert here is not None, f"{'.'.join([*path, str(key)])} has no row"
            if ".".join(here) not in keys:
                walk(value, here)

    for name in ("config.yaml", "mini.yaml", "smoke.yaml"):
        walk(yaml.safe_load((ROOT / "config" / name).read_text()), [])


def test_the_table_lists_every_schema_key_once_and_nothing_else():
    assert sorted(table_rows()) == sorted(schema_keys())


@pytest.mark.parametrize("key", schema_keys())
def test_each_row_gives_a_meaning_the_paper_and_mini_values_and_a_source(key):
    paper = yaml.safe_load((ROOT / "config/config.yaml").read_text())
    mini = vlconfig.load([ROOT / "config/config.yaml", ROOT / "config/mini.yaml"])
    meaning, paper_value, mini_value, source = table_rows()[key]
    assert meaning and source in SOURCES
    expected, expected_mini = (effective(config, key) for config in (paper, mini))
    assert paper_value == expected
    assert mini_value == ("same" if expected_mini == expected else expected_mini)


def test_the_table_is_the_one_config_reference_writes(tmp_path, capsys):
    """The table's meanings and sources have one home, the schema: `python -m vlbind config-reference` writes the
    table from it and the config files, and --write replaces an out-of-date table with it."""
    from vlbind.cli import main

    configs = ["--paper", str(ROOT / "config/config.yaml"), "--mini", str(ROOT / "config/mini.yaml")]
    assert main(["config-reference", *configs]) == 0
    table = capsys.readouterr().out
    readme = (ROOT / "config/README.md").read_text()
    assert readme.endswith(table), "config/README.md's table is out of date: python -m vlbind config-reference --write"
    stale = tmp_path / "README.md"
    stale.write_text(readme.replace("| `train.lr` | peak", "| `train.lr` | a stale meaning"))
    assert main(["config-reference", *configs, "--write", str(stale)]) == 0
    assert stale.read_text() == readme

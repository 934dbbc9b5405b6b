"""docs/ARCHITECTURE.md, claim by claim where a test can check one: the data-flow table's rules live in the rule
files it names and run the adapters it names, and the library names it gives exist; the module table lists every
module, and the ones it calls torch-free import no torch; every adapter that runs a model resolves its device with
device.job_device before anything else touches the model."""

import ast
import importlib
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs/ARCHITECTURE.md").read_text()


def table(heading: str) -> list[list[str]]:
    """The rows (cells) of the table in the section under `heading`."""
    lines = []
    for line in DOC.split(heading + "\n", 1)[1].splitlines():
        if line.startswith("## "):
            break
        lines.append(line)
    rows = [line for line in lines if line.startswith("|")]
    return [[c.strip() for c in r.strip().strip("|").split("|")] for r in rows[2:]]


def rules() -> dict[str, tuple[str, str | None]]:
    """rule name -> (its .smk file, the script it runs), `use rule` inheriting the script."""
    found = {}
    for smk in sorted((ROOT / "workflow/rules").glob("*.smk")):
        text = smk.read_text()
        blocks = re.split(r"^(?=rule |use rule )", text, flags=re.M)
        for block in blocks:
            if m := re.match(r"rule (\w+):", block):
                script = re.search(r'script:\s*"\.\./\.\./scripts/(\w+\.py)"', block)
                found[m.group(1)] = (smk.name, script and script.group(1))
            elif m := re.match(r"use rule (\w+) as (\w+)", block):
                found[m.group(2)] = (smk.name, found[m.group(1)][1])
    return found


def expand(name: str) -> list[str]:
    """`a.{b,c}` -> [a.b, a.c]."""
    m = re.match(r"(.*)\{(.*)\}(.*)", name)
    return [f"{m.group(1)}{x}{m.group(3)}" for x in m.group(2).split(",")] if m else [name]


def resolve(dotted: str):
    """vlbind.<dotted> as a module, or an attribute of the module before its last part."""
    try:
        return importlib.import_module(f"vlbind.{dotted}")
    except ModuleNotFoundError:
        module, _, attr = dotted.rpartition(".")
        return getattr(importlib.import_module(f"vlbind.{module}"), attr)


def test_the_data_flow_table_names_real_rules_adapters_and_library_functions():
    known, smk, listed = rules(), None, set()
    for rule_cell, adapter_cell, library_cell, _ in table("## Data flow"):
        if m := re.search(r"\((\w+\.smk)", rule_cell):
            smk = m.group(1)
        names = [n for n in re.findall(r"`(\w+)`", rule_cell)]
        names += [n for group in re.findall(r"`([\w/]+)`", rule_cell) for n in group.split("/") if "/" in group]
        adapters = [a.strip() for a in adapter_cell.split(",")]
        for name in names:
            assert name in known, f"ARCHITECTURE.md names rule {name!r}; the rules are {sorted(known)}"
            file, script = known[name]
            assert file == smk, f"rule {name} lives in {file}, not {smk}"
            if script is not None:
                assert any(fnmatch(script, a) for a in adapters), f"rule {name} runs {script}, not {adapters}"
            listed.add(name)
        for ref in re.findall(r"`([\w.{},]+)`", library_cell):
            for dotted in expand(ref):
                assert resolve(dotted) is not None, dotted
    assert listed == set(known), f"rules missing from the table: {sorted(set(known) - listed)}"


def modules() -> set[str]:
    """Every module of the package but its entry points, as `package/module` or `module` (top level)."""
    src = ROOT / "src/vlbind"
    return {str(p.relative_to(src).with_suffix("")) for p in src.rglob("*.py")
            if p.name not in ("__init__.py", "__main__.py")}


def test_the_package_table_lists_every_module_in_its_package():
    listed = set()
    for row in table("## Packages, top layer first"):
        if m := re.match(r"`(\w+)/`: (.*)", row[1]):
            listed |= {f"{m.group(1)}/{name}" for name in re.findall(r"`(\w+)`", m.group(2))}
        else:
            listed |= set(re.findall(r"`(\w+)`", row[1]))
    assert listed == modules()


def test_the_package_table_orders_the_layers_as_the_contract_does():
    """The table's layer column, top first, is .importlinter's contract, layer for layer."""
    from test_layering import contract_layers

    contract = contract_layers()
    layers: dict[int, set[str]] = {}
    for row in table("## Packages, top layer first"):
        layers.setdefault(int(row[0]), set()).add("vlbind." + re.match(r"`(\w+)", row[1]).group(1))
    assert [layers[k] for k in sorted(layers)] == [{n.strip() for n in layer.split("|")} for layer in contract]


def imports_torch_at_load(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in tree.body:  # module level only: a function may import torch when it is called
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "torch" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            return True
    return False


@pytest.mark.parametrize("module", ["core/settings", "core/stages", "core/schema", "core/vocab", "core/files", "config",
                                    "captions", "evaluation/outcomes", "evaluation/tables", "evaluation/claims",
                                    "interp/mechanisms", "figures/__init__", "figures/base", "figures/accuracy",
                                    "figures/analyses", "data/tasks", "training/config"])
def test_the_modules_the_doc_calls_torch_free_import_no_torch(module):
    assert not imports_torch_at_load(ROOT / f"src/vlbind/{module}.py")
    assert not imports_torch_at_load(ROOT / "src/vlbind/interp/__init__.py")


MODEL_CALL = r"load_model\(|jobs\.for_job\(|Transformer\(|load_encoder\(|build_encoder\(|pretrain\(|extract\("


def test_every_adapter_that_runs_a_model_calls_job_device_first():
    for script in sorted((ROOT / "scripts").glob("*.py")):
        text = script.read_text()
        runs_model = re.search(MODEL_CALL, text)
        if not runs_model:
            continue
        assert "job_device(" in text, f"{script.name} runs a model without device.job_device"
        assert text.index("job_device(") < runs_model.start(), f"{script.name}: job_device after the model"

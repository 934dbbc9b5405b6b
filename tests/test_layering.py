"""The library's modules import each other along one direction: no cycle, function-level imports included."""

import ast
import configparser
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path, typing: bool = False) -> set[str]:
    """vlbind modules `path` imports anywhere in its body; those under `if TYPE_CHECKING:` only if `typing`."""
    name, tree = module_name(path), ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                   and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING") for n in ast.walk(node)}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("vlbind")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            if not base.startswith("vlbind"):
                continue
            for a in node.names:  # `from . import interchange` names a submodule
                found.add(f"{base}.{a.name}" if (SRC / Path(*base.split(".")) / f"{a.name}.py").exists() else base)
    return found - {name}


def graph(typing: bool = False) -> dict[str, set[str]]:
    return {module_name(p): imports(p, typing) for p in sorted((SRC / "vlbind").rglob("*.py"))}


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_the_import_graph_sees_relative_and_function_level_imports():
    g = graph()
    assert "vlbind.config" in g["vlbind.cli"]  # `from . import config as vlconfig` inside a function
    assert "vlbind.model.inference" in g["vlbind.interp.interchange"]  # `from ..inference import ...`
    assert "vlbind.data.tasks" in g["vlbind.config"]  # a function-level import


def test_no_import_cycle_in_the_library():
    assert cycle(graph()) is None, " -> ".join(cycle(graph()))


def test_no_cycle_hides_behind_type_checking_imports():
    """An import made for annotations only (`if TYPE_CHECKING:`) counts: it must point down too, so that no module
    names a type from one that imports it (TrainConfig lives in training.config, below the loop, losses, optim and
    resume that read it)."""
    typed = graph(typing=True)
    assert typed != graph()  # there are such imports, and the walk sees them
    assert cycle(typed) is None, " -> ".join(cycle(typed))


CONTRACT = SRC.parent / ".importlinter"


def contract_layers() -> list[str]:
    """The layers of .importlinter's contract, top first."""
    config = configparser.ConfigParser()
    config.read(CONTRACT)
    return [line.strip() for line in config["importlinter:contract:layers"]["layers"].splitlines() if line.strip()]


def lint(tmp_path, layers: list[str] | None = None) -> tuple[int, str]:
    """import-linter on the package with .importlinter's contract (or with `layers` in place of its layers): exit code
    and report."""
    config = configparser.ConfigParser()
    config.read(CONTRACT)
    if layers is not None:
        config["importlinter:contract:layers"]["layers"] = "\n" + "\n".join(layers)
    ini = tmp_path / "importlinter.ini"
    with ini.open("w") as f:
        config.write(f)
    proc = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           f"sys.exit(lint_imports(config_filename={str(ini)!r}, no_cache=True, no_logo=True))"],
                          capture_output=True, text=True, cwd=tmp_path)
    return proc.returncode, proc.stdout + proc.stderr


def test_the_package_keeps_its_layers(tmp_path):
    """.importlinter's contract: each subpackage imports only from the layers below it, imports inside
    functions and under TYPE_CHECKING included."""
    code, report = lint(tmp_path)
    assert code == 0, report


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """The same check with two layers swapped fails, naming an import that crosses them: the linter reads the
    package's imports, so the contract above can fail."""
    code, report = lint(tmp_path, ["vlbind.core", "vlbind.data"])  # data imports core: upward once swapped
    assert code != 0 and "vlbind.data" in report and "BROKEN" in report, report

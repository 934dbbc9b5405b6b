"""The library's modules import each other along one direction: no cycle, function-level imports included."""

import ast
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
    assert "vlbind.inference" in g["vlbind.interp.interchange"]  # `from ..inference import ...`
    assert "vlbind.tasks" in g["vlbind.config"]  # a function-level import


def test_no_import_cycle_in_the_library():
    assert cycle(graph()) is None, " -> ".join(cycle(graph()))


def test_no_cycle_hides_behind_type_checking_imports():
    """An import made for annotations only (`if TYPE_CHECKING:`) counts: it must point down too, so that no module
    names a type from one that imports it (train.TrainConfig did, from losses, optim and resume: now train_config)."""
    typed = graph(typing=True)
    assert typed != graph()  # there are such imports, and the walk sees them
    assert cycle(typed) is None, " -> ".join(cycle(typed))

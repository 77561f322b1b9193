"""The runtime package's own layout: no import cycle between its modules (lazy imports inside
functions count too), no private name imported from a sibling module, no module over 600 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pipec_runtime_cudagraph

PACKAGE = Path(pipec_runtime_cudagraph.__file__).parent
MAX_LINES = 600


def _imports() -> dict[str, list[tuple[str, list[str]]]]:
    """module -> [(sibling module, names imported from it)], from every `from . import` anywhere."""
    found: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        edges = found.setdefault(path.stem, [])
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    edges.append((node.module.split(".")[0], [a.name for a in node.names]))
                else:
                    edges.extend((a.name, []) for a in node.names)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        for dep in sorted(graph.get(module, ())):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep, path + [dep])
                if found:
                    return found
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state:
            found = visit(module, [module])
            if found:
                return found
    return None


def test_no_import_cycle_inside_the_package():
    graph = {m: {dep for dep, _ in edges} for m, edges in _imports().items()}
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_the_cycle_check_finds_one():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_private_name_imported_from_a_sibling():
    private = [(m, dep, n) for m, edges in _imports().items() for dep, names in edges for n in names
               if n.startswith("_")]
    assert private == []


def test_no_module_over_600_lines():
    long = {p.name: n for p in PACKAGE.glob("*.py") if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert long == {}

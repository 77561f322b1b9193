"""The layering rules of docs/architecture.md, checked on the source with `ast` (no imports run).

1. Cross-stage imports: a stage package (capture, fusion, codegen, runtime) never imports
   another stage package, in `src/` or its `tests/`; pipec_ir, the contract, imports no pipec
   package and neither torch nor triton; fusion and codegen do not import torch or triton
   (codegen emits Triton source as text; its tests may import triton to run it). Only the cli
   package (`pipec`) imports stage packages.
2. No import cycle inside a package: imports at module level *and* inside functions count (a
   function-level import that closes a cycle only hides it from the interpreter). Imports under
   `if TYPE_CHECKING:` do not count.
3. No module-level mutable registry: a module-level dict/list/set (or defaultdict, WeakKeyDictionary,
   ...) that a function of the module mutates (item assignment or deletion, `append`, `update`,
   `setdefault`, `pop`, ...), or a module-level name a function rebinds with `global`. That is
   state shared by everything in the process; it belongs to an object passed along (a kernel
   writer, a loaded model), or to the plugin registry (`pipec/plugins.py`). Tables filled at
   import time and never changed after are fine.

Run it as a script (`python tests/layering.py [packages_dir]`) or through tests/test_layering.py.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

STAGE_PACKAGES = ("pipec_capture", "pipec_fusion", "pipec_codegen_triton", "pipec_runtime_cudagraph")
CONTRACT = "pipec_ir"
# What each package's src must not import (besides other stage packages, rule 1).
FORBIDDEN_SRC = {
    "pipec_ir": ("torch", "triton", "pipec", *STAGE_PACKAGES),
    "pipec_fusion": ("torch", "triton"),
    "pipec_codegen_triton": ("torch", "triton"),
}
FORBIDDEN_TESTS = {
    "pipec_ir": ("pipec", *STAGE_PACKAGES),
}
MUTABLE_CALLS = frozenset({"dict", "list", "set", "defaultdict", "OrderedDict", "Counter", "deque",
                           "WeakKeyDictionary", "WeakValueDictionary", "WeakSet", "ChainMap"})
MUTATING_METHODS = frozenset({"append", "extend", "insert", "add", "update", "setdefault", "pop", "popitem",
                              "remove", "discard", "clear", "appendleft", "popleft", "__setitem__",
                              "move_to_end", "sort", "reverse"})


@dataclass
class Module:
    name: str  # dotted, e.g. "pipec_capture.lower"
    path: Path
    is_package: bool
    tree: ast.Module
    eager: set[str] = field(default_factory=set)  # imports run when the module is imported
    lazy: set[str] = field(default_factory=set)  # imports inside functions
    external: list[tuple[str, int, bool]] = field(default_factory=list)  # (top-level name, line, in a function)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module):
    """(node, inside a function) for every import statement, skipping `if TYPE_CHECKING:` blocks."""
    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for sub in child.orelse:
                    yield from walk(ast.Module(body=[sub], type_ignores=[]), in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                yield child, in_function
            inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            yield from walk(child, inner)
    yield from walk(tree, False)


def load_package(src: Path) -> dict[str, Module]:
    """Every module of the package directory `src` (holding __init__.py), parsed, by dotted name."""
    modules = {}
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src.parent).with_suffix("").parts
        is_package = rel[-1] == "__init__"
        name = ".".join(rel[:-1] if is_package else rel)
        modules[name] = Module(name, path, is_package, ast.parse(path.read_text(), filename=str(path)))
    for module in modules.values():
        _resolve(module, modules)
    return modules


def _resolve(module: Module, modules: dict[str, Module]) -> None:
    for node, in_function in _imports(module.tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif node.level:  # relative: within this package by construction
            base = module.name if module.is_package else module.name.rpartition(".")[0]
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            base = f"{base}.{node.module}" if node.module else base
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            base = node.module or ""
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        for target in targets:
            internal = _longest_module(target, modules)
            if internal is not None:
                if internal != module.name:
                    (module.lazy if in_function else module.eager).add(internal)
            else:
                module.external.append((target.split(".")[0], node.lineno, in_function))


def _longest_module(name: str, modules: dict[str, Module]) -> str | None:
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        if candidate in modules:
            return candidate
    return None


def cycles(modules: dict[str, Module]) -> list[list[str]]:
    """The import cycles (strongly connected components of more than one module), each sorted."""
    graph = {name: sorted(m.eager | m.lazy) for name, m in modules.items()}
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def connect(v):  # Tarjan, iterative enough for packages of a few dozen modules
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def cross_stage_imports(package: str, modules: dict[str, Module], where: str = "src") -> list[str]:
    """Rule 1 for one package's modules (`where`: "src" or "tests")."""
    forbidden = set((FORBIDDEN_SRC if where == "src" else FORBIDDEN_TESTS).get(package, ()))
    if package in STAGE_PACKAGES:
        forbidden |= set(STAGE_PACKAGES) - {package}
    problems = []
    for m in modules.values():
        for top, line, _ in m.external:
            if top in forbidden:
                problems.append(f"{m.path}:{line}: {package} imports {top} (a stage package imports only "
                                f"{CONTRACT} of pipec's packages; see docs/architecture.md)")
    return problems


def _module_level_containers(tree: ast.Module) -> dict[str, int]:
    """Module-level names bound to a mutable container: name -> line."""
    found = {}
    for node in tree.body:
        targets, value = [], None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if value is None or not _is_mutable(value):
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                found[t.id] = node.lineno
    return found


def _is_mutable(value: ast.expr) -> bool:
    if isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(value, ast.Call):
        fn = value.func
        name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
        return name in MUTABLE_CALLS
    return False


def mutable_registries(modules: dict[str, Module]) -> list[tuple[str, str, str]]:
    """Rule 3: (module, name, what) for each module-level mutable state a function changes."""
    found = []
    for m in modules.values():
        containers = _module_level_containers(m.tree)
        changed: dict[str, str] = {}
        for fn in ast.walk(m.tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            local = {a.arg for a in fn.args.args + fn.args.kwonlyargs + fn.args.posonlyargs}
            for node in ast.walk(fn):
                if isinstance(node, ast.Global):
                    for name in node.names:
                        changed.setdefault(name, "rebound with `global`")
                elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
                    targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
                    for t in targets:
                        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) \
                                and t.value.id in containers and t.value.id not in local:
                            changed.setdefault(t.value.id, "item assigned or deleted in a function")
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                        and node.func.attr in MUTATING_METHODS and isinstance(node.func.value, ast.Name) \
                        and node.func.value.id in containers and node.func.value.id not in local:
                    changed.setdefault(node.func.value.id, f"`.{node.func.attr}()` in a function")
        for name, what in sorted(changed.items()):
            found.append((m.name, name, what))
    return found


@dataclass
class Report:
    cross_stage: list[str]
    cycles: dict[str, list[list[str]]]  # package -> its cycles
    registries: list[tuple[str, str, str]]


def check(packages_dir: Path) -> Report:
    """Check every package under `packages_dir` (each `<folder>/src/<import name>/`, tests in `<folder>/tests/`)."""
    cross, found_cycles, registries = [], {}, []
    for src in sorted(packages_dir.glob("*/src/*/__init__.py")):
        package_dir = src.parent
        package = package_dir.name
        modules = load_package(package_dir)
        cross += cross_stage_imports(package, modules, "src")
        tests = package_dir.parent.parent / "tests"
        if tests.is_dir():
            for path in sorted(tests.rglob("*.py")):
                mod = Module(path.stem, path, False, ast.parse(path.read_text(), filename=str(path)))
                _resolve(mod, {})
                cross += cross_stage_imports(package, {mod.name: mod}, "tests")
        package_cycles = cycles(modules)
        if package_cycles:
            found_cycles[package] = package_cycles
        registries += mutable_registries(modules)
    return Report(cross, found_cycles, registries)


if __name__ == "__main__":
    report = check(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "packages")
    for line in report.cross_stage:
        print("cross-stage:", line)
    for package, package_cycles in report.cycles.items():
        for c in package_cycles:
            print(f"cycle in {package}: {' <-> '.join(c)}")
    for module, name, what in report.registries:
        print(f"module-level mutable state: {module}.{name} ({what})")

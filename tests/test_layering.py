"""The layering rules (docs/architecture.md, "Layering"), checked on the source by tests/layering.py:
no cross-stage import, no import cycle inside a package, no module-level mutable registry
outside the plugin registry. The last tests show the checker failing on a package with an
added cycle, a cross-stage import and a registry.
"""

import shutil
from pathlib import Path

from layering import check

PACKAGES = Path(__file__).resolve().parents[1] / "packages"

# Import cycles that exist today (issue 25, "Modules with many jobs"), each the set of modules
# of one cycle. A cycle found is accepted when all its modules are in one of these sets; a set
# no cycle touches any more fails the test, so the list only shrinks.
KNOWN_CYCLES: list[set[str]] = []

# Module-level state a function changes. The plugin registry is the one place meant for it;
# the rest is debt (issue 25, "Hidden process-wide state") or a memo of a pure function,
# each with its reason. A name no longer found fails the test: remove it here.
ALLOWED_STATE = {
    "pipec.plugins._STATE": "the plugin manager and registry, built once per process (the design)",
    # memos of pure functions: same answer whatever ran before
    "pipec_ir.serialize._HINT_CACHE": "memo: type hints per IR class",
    "pipec_ir.serialize._FAST": "memo: a decoder per IR class",
    "pipec_ir.serialize._FIELDS": "memo: the fields and hints of each IR class, for encoding",
    "pipec_ir.serialize._ARGS": "memo: the arguments of each type hint, for encoding",
    "pipec.cache.keys._FILE_DIGESTS": "memo: a source file's digest, keyed by path, mtime and size",
    "pipec.cache.keys._SOURCES": "memo: a distribution's source files",
    "pipec.logs._applied": "memo: the PIPEC_LOGS setting last applied to Python's (process-wide) loggers",
    "pipec_runtime_cudagraph.tma._SM_COUNTS": "memo: a device's SM count",
    "pipec_capture.attention._CUDNN_CHECKED": "memo: whether cuDNN's attention with a bias passed its check, per device and dtype",
    "pipec_capture.table.LOWERINGS": "the op table, filled at import time by the lowering decorators",
    # process resources: what no result depends on
    "pipec_runtime_cudagraph.compile_pool._pool": "the process's Triton compile workers, serving every model (as Inductor's)",
    "pipec_runtime_cudagraph.compile_pool._disabled": "why the compile workers stopped for the process (one warning)",
    # debts: state that changes what a later compilation does, or outlives a model
    "pipec_capture.symbols._DEFINITIONS": "debt: symbol definitions per shape environment",
    "pipec_runtime_cudagraph.kernels._modules": "debt: loaded kernel modules (no size limit)",
    "pipec_runtime_cudagraph.kernels._fallback_dir": "debt: the kernel directory when none is given",
    "pipec_runtime_cudagraph.interpreter._twins": "debt: interpreter twins of Triton kernels",
    "pipec_runtime_cudagraph.interpreter._announced": "debt: the once-per-process interpreter note",
    "pipec_runtime_cudagraph.fastlaunch._runtime": "debt: the fast launcher, found once",
    "pipec_runtime_cudagraph.variants.OWNED": "debt: live CUDA Graph outputs",
    "pipec_runtime_cudagraph.capture_support._CAPTURE_STREAMS": "debt: a capture stream per device",
}


def violations(report, known_cycles=KNOWN_CYCLES, allowed_state=ALLOWED_STATE) -> list[str]:
    """What breaks the rules beyond the allow-lists, and allow-list entries nothing needs any more."""
    problems = [f"cross-stage import: {line}" for line in report.cross_stage]
    found = [set(c) for package_cycles in report.cycles.values() for c in package_cycles]
    for cycle in found:
        if not any(cycle <= known for known in known_cycles):
            problems.append(f"import cycle: {' <-> '.join(sorted(cycle))} (import what both need from a "
                            "third module, or pass it in; a function-level import does not count as a fix)")
    for known in known_cycles:
        if not any(cycle & known for cycle in found):
            problems.append(f"known cycle {sorted(known)} is gone: remove it from KNOWN_CYCLES")
    state = {f"{module}.{name}": what for module, name, what in report.registries}
    for name, what in state.items():
        if name not in allowed_state:
            problems.append(f"module-level mutable state: {name} ({what}); keep it in an object that is "
                            "passed along, or register it as a plugin")
    for name in allowed_state:
        if name not in state:
            problems.append(f"{name} is no longer module-level mutable state: remove it from ALLOWED_STATE")
    return problems


def test_the_packages_keep_the_layering_rules():
    assert violations(check(PACKAGES)) == []


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_checker_fails_on_a_cycle_added_to_a_real_package(tmp_path):
    """A copy of pipec_fusion passes; with heuristics.py importing plugin.py (which imports
    heuristics) it has a cycle, and the rule fails, even when the import is inside a function."""
    copy = tmp_path / "packages" / "fusion" / "src" / "pipec_fusion"
    shutil.copytree(PACKAGES / "fusion" / "src" / "pipec_fusion", copy)
    report = check(tmp_path / "packages")
    assert report.cycles == {} and report.cross_stage == []

    heuristics = copy / "heuristics.py"
    heuristics.write_text(heuristics.read_text() + "\n\ndef _late():\n    from .plugin import pipec_register\n"
                          "    return pipec_register\n")
    report = check(tmp_path / "packages")
    [cycle] = report.cycles["pipec_fusion"]  # plugin -> pipec_fusion (preset) -> heuristics -> plugin
    assert {"pipec_fusion.heuristics", "pipec_fusion.plugin", "pipec_fusion"} <= set(cycle)
    [problem] = violations(report, known_cycles=[], allowed_state={})
    assert problem.startswith("import cycle: pipec_fusion <-> ") and "pipec_fusion.plugin" in problem


def test_the_checker_finds_cross_stage_imports_cycles_and_registries(tmp_path):
    packages = tmp_path / "packages"
    src = packages / "fusion" / "src" / "pipec_fusion"
    _write(src / "__init__.py", "from .a import f\n")
    _write(src / "a.py", "from . import b\n\ndef f():\n    return b.g()\n")
    _write(src / "b.py", "import pipec_fusion.c\n")
    _write(src / "c.py", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import f\n"
                         "from .a import f as g\n")  # the TYPE_CHECKING import does not count; the other does
    _write(src / "d.py", "import torch\nfrom pipec_capture import lower\nimport pipec_ir\n"
                         "_SEEN = {}\nTABLE = {'a': 1}\n\ndef remember(k):\n    _SEEN[k] = True\n")
    _write(packages / "fusion" / "tests" / "test_x.py", "import pipec_codegen_triton\nimport torch\n")
    _write(packages / "ir" / "src" / "pipec_ir" / "__init__.py", "_ON = False\n\ndef on():\n"
           "    global _ON\n    _ON = True\n\ndef later():\n    import triton\n")
    report = check(packages)
    assert report.cycles == {"pipec_fusion": [["pipec_fusion.a", "pipec_fusion.b", "pipec_fusion.c"]]}
    cross = "\n".join(report.cross_stage)
    assert "d.py:1: pipec_fusion imports torch" in cross
    assert "d.py:2: pipec_fusion imports pipec_capture" in cross
    assert "test_x.py:1: pipec_fusion imports pipec_codegen_triton" in cross
    assert "test_x.py:2" not in cross  # a stage's tests may import torch
    assert "pipec_ir/__init__.py:8: pipec_ir imports triton" in cross  # inside a function too
    assert "d.py:3" not in cross  # pipec_ir is what crosses
    assert sorted(report.registries) == [("pipec_fusion.d", "_SEEN", "item assigned or deleted in a function"),
                                         ("pipec_ir", "_ON", "rebound with `global`")]
    assert len(violations(report, known_cycles=[], allowed_state={})) == 4 + 1 + 2

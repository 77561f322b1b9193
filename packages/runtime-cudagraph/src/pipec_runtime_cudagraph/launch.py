"""The ``launch`` runtime: a `Program` run as a flat list of prebuilt step closures.

Its parts, by job:

* ``steps.py`` — the step objects: a kernel launch (and the calling convention codegen must
  emit) and an ATen extern call;
* ``autotune.py`` — compiling a launch's candidate configs at once, timing them, and what
  was picked;
* ``plan.py`` — load-time planning: value index, size symbols, allocations, release points;
* ``runner.py`` — `ProgramRunner`: the per-call path (checks, allocation, the step loop,
  specialized runs).

This module is the runtime's entry point (`load_launch`) and keeps the names other packages
import from it.
"""

from __future__ import annotations

from collections.abc import Callable

from pipec_ir import CompileOptions, LoadContext, Program

from .runner import ProgramRunner, outputs_to_caller
from .steps import TORCH_DTYPES, ProgramLoadError, gluon_cannot_run, resolve_target, written_over


def load_launch(program: Program, options: CompileOptions | None = None,
                context: LoadContext | None = None) -> Callable[[list], list]:
    """The ``launch`` runtime's `load`: a callable list[Tensor] -> list[Tensor | None]."""
    return ProgramRunner(program, options, context)


__all__ = ["TORCH_DTYPES", "ProgramLoadError", "ProgramRunner", "gluon_cannot_run", "load_launch",
           "outputs_to_caller", "resolve_target", "written_over"]

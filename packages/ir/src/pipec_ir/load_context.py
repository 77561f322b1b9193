"""LoadContext: what a runtime is handed at load time besides the Program and the options.

`CompileOptions` is a value: everything in it may enter a cache key. What a runtime needs
that is live state of the model being loaded travels beside it, in a `LoadContext` given to
`Runtime.load(program, options, context)`. The front end (pipec.compile, the `pipec`
command) makes one per compiled model; every graph of the model, and every recompile, is
loaded with the same one, so what the runtime learns while loading one graph (the fastest
config of a kernel) serves the others. Nothing in it enters a cache key.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from .budget import RecompileBudget
from .profile import CompileProfile

T = TypeVar("T")


@dataclass(eq=False)
class LoadContext:
    """The live state one loaded model shares with its runtime.

    * `budget`: the model's recompile budget, shared by Dynamo recompiles and the CUDA Graph
      runtime's re-records; None: each program gets a private one (`recompile_limit`).
    * `profile`: where the runtime records loading, Triton compiles, autotuning and the first
      call (`CompileProfile`); None: nothing is recorded.
    * `kernel_dir`: where kernel sources and the tuning cache are written; None: the
      runtime's default directory (the front end reads `$PIPEC_KERNEL_DIR` into it).
    * `tuning_cache`: whether autotuning results are read from and written to disk.
    * `compile_workers`: worker processes compiling Triton kernels; None: the runtime's
      default (one per core), 0: none (the front end reads `$PIPEC_COMPILE_WORKERS` into it).
    * `memos`: objects a runtime keeps for the whole model (`memo`), e.g. its table of
      autotuning picks; they live as long as the context.
    """

    budget: RecompileBudget | None = None
    profile: CompileProfile | None = None
    kernel_dir: str | None = None
    tuning_cache: bool = True
    compile_workers: int | None = None
    memos: dict[str, object] = field(default_factory=dict, repr=False)

    def memo(self, key: str, factory: Callable[[], T]) -> T:
        """The model's memo object named `key` (a runtime's own name, e.g. its package), made by
        `factory()` the first time it is asked for."""
        value = self.memos.get(key)
        if value is None:
            value = self.memos[key] = factory()
        return value


def load_with(runtime, program, options, context: LoadContext | None = None):
    """`runtime.load(program, options, context=context)` where its `load` takes `context` (a
    parameter of that name, or `**kwargs`), else `runtime.load(program, options)`: how the
    pipeline calls a runtime, and how a runtime that wraps another calls the one it wraps (a
    runtime written before LoadContext keeps working)."""
    if context is not None and _takes_context(runtime.load):
        return runtime.load(program, options, context=context)
    return runtime.load(program, options)


def _takes_context(load) -> bool:
    try:
        parameters = inspect.signature(load).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "context" or p.kind is p.VAR_KEYWORD for p in parameters)


__all__ = ["LoadContext", "load_with"]

"""Stage protocols: what a capture / fusion / codegen / runtime / cache implementation provides."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable
from collections.abc import Callable

from .load_context import LoadContext
from .options import CompileOptions
from .types import Graph, KernelPlan, Program


@runtime_checkable
class Capture(Protocol):
    def capture(self, gm: Any, example_inputs: list, options: CompileOptions) -> Graph: ...


@runtime_checkable
class Fusion(Protocol):
    def fuse(self, graph: Graph, options: CompileOptions) -> KernelPlan: ...


@runtime_checkable
class Codegen(Protocol):
    def generate(self, plan: KernelPlan, options: CompileOptions) -> Program: ...


@runtime_checkable
class Runtime(Protocol):
    """`load` makes a Program callable. `context` carries the loaded model's live state (its
    recompile budget, compile profile, kernel directory, tuning memos: `LoadContext`); the
    pipeline passes it as a keyword to a runtime whose `load` takes `context`, and calls one
    whose `load` does not with (program, options) only."""

    def load(self, program: Program, options: CompileOptions,
             context: LoadContext | None = None) -> Callable[[list], list]: ...


@runtime_checkable
class Cache(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...

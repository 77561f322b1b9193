"""Stage protocols: what a capture / fusion / codegen / runtime / cache implementation provides.

`Registry.add_*` checks an implementation against these (runtime-checkable: the methods
must exist; their signatures are the contract below). docs/plugins.md says how to write one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable
from collections.abc import Callable

from .load_context import LoadContext
from .options import CompileOptions
from .types import Graph, KernelPlan, Program


@runtime_checkable
class Capture(Protocol):
    """ATen fx graph (or model) -> `Graph`. The torch.compile path also needs
    `dynamo_backend(compile_aten_graph[, options[, profile]])` (the front end passes what the
    signature takes; `profile`, the compile-time recorder, times the capture's own device checks);
    tensor constants need `constants(gm, graph)`."""

    def capture(self, gm: Any, example_inputs: list, options: CompileOptions) -> Graph: ...


@runtime_checkable
class Fusion(Protocol):
    """`Graph` -> `KernelPlan`: every node in one kernel, every refused merge with a reason."""

    def fuse(self, graph: Graph, options: CompileOptions) -> KernelPlan: ...


@runtime_checkable
class Codegen(Protocol):
    """`KernelPlan` -> `Program`: kernel sources, launches, the buffer plan."""

    def generate(self, plan: KernelPlan, options: CompileOptions) -> Program: ...


@runtime_checkable
class Runtime(Protocol):
    """`Program` -> a callable taking the graph's inputs (a list of tensors) and returning
    its outputs (a list). `context` carries the loaded model's live state (its recompile
    budget, compile profile, kernel directory, tuning memos: `LoadContext`); the pipeline
    passes it as a keyword to a runtime whose `load` takes `context`, and calls one whose
    `load` does not with (program, options) only (`pipec_ir.load_with`, which a runtime
    wrapping another uses too)."""

    def load(self, program: Program, options: CompileOptions,
             context: LoadContext | None = None) -> Callable[[list], list]: ...


@runtime_checkable
class Cache(Protocol):
    """A compile-cache backend: opaque bytes under a lowercase hex key (16 to 128 digits).

    Required (checked at registration):
    - `get(key) -> bytes | None`: the bytes last `put` under `key`, or None when absent.
    - `put(key, data) -> None`: store `data` under `key`, replacing any entry; a reader must
      see the whole entry or none (write atomically).

    Optional, found with getattr (see `CacheAdmin`):
    - `location` (attribute or property, str): where the entries live, for messages.
    - `check() -> object`: make sure the backend is usable now (create a directory, connect);
      called before a compilation that uses the cache.
    - `delete(key) -> None`: remove one entry (absent is fine); without it a damaged entry
      stays until the recompiled one replaces it.
    - `info() -> dict`: at least `{"location": str, "entries": int, "bytes": int}`
      (`pipec cache info`).
    - `clear() -> int`: delete every entry of this backend and nothing else; the number removed
      (`pipec cache clear`).

    Errors: raise `pipec_ir.CacheError` (one line saying what to do) when the backend cannot
    be used at all; pipec stops with exit code 2. Any other exception from `get`, `put` or
    `delete` costs one warning and the compilation goes on without that entry. Entries are
    checked by pipec (a sha256 header) whatever the backend, so a backend need not validate.
    """

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, data: bytes) -> None: ...


@runtime_checkable
class CacheAdmin(Cache, Protocol):
    """A `Cache` with every optional method (the built-in `local` and `redis` backends)."""

    @property
    def location(self) -> str: ...

    def check(self) -> object: ...

    def delete(self, key: str) -> None: ...

    def info(self) -> dict: ...

    def clear(self) -> int: ...

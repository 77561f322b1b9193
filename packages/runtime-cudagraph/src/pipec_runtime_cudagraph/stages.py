"""The runtime stage objects registered with pipec (they import torch/triton only in `load` and `warm`)."""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable

from pipec_ir import CompileOptions, LoadContext, Program, verify

# The options these runtimes read only when they load a Program (README: dynamic shapes,
# autotuning, the GEMM choice). They cannot change what capture, fusion or codegen produce,
# so the front end leaves them out of cache keys (`CompileOptions.key(exclude=...)`).
# `early_compile` is read by capture too (when AOTAutograd hands over the backward), which
# changes when a graph is lowered, not what it is lowered to.
LOAD_OPTIONS = frozenset({"recompile_limit", "bucket", "choice", "autotune_configs", "specialize", "tuning_table",
                          "early_compile", "launch_store"})


def warm_compile_workers(context: LoadContext | None = None) -> None:
    """Start the Triton compile workers (compile_pool.py) in the background where the first call
    will compile on a GPU: the front end calls this when a compile starts, so that the workers
    import Triton while Dynamo, AOTAutograd and the other stages run, instead of after them.
    Triton's own cache key is computed in a thread meanwhile (`warm_triton_key`)."""
    import torch

    if torch.cuda.is_available():
        from .compile_pool import pool_size, warm

        warm(pool_size(context.compile_workers if context is not None else None))
        warm_triton_key()


@functools.cache
def warm_triton_key() -> threading.Thread | None:
    """Compute `triton.runtime.cache.triton_key()` in a background thread, once per process (the
    cache: a process resource like the compile workers; the thread, or None without Triton).

    Every Triton compile and cache lookup needs that key, a hash of Triton's sources and of
    libtriton (500 MB with triton 3.9), which Triton computes once per process on first use:
    0.76 s of a cold BERT training step's runtime load on the H200 (session 20), and as much of
    every warm compile. Started when a compile starts, it runs while Dynamo and AOTAutograd
    trace, mostly in file reads and hashing that release the GIL. Triton is imported here, on
    the caller's thread, so that the thread mostly hashes (the key's walk over Triton's packages
    imports only the few not imported yet). Best effort: where it fails, Triton computes the
    key itself when it needs it."""
    try:
        from triton.runtime.cache import triton_key
    except ImportError:
        return None

    def compute() -> None:
        with contextlib.suppress(Exception):
            triton_key()

    thread = threading.Thread(target=compute, name="pipec-triton-key", daemon=True)
    thread.start()
    return thread


class LaunchRuntime:
    """Runs a Program's steps one after the other (Triton's interpreter without CUDA)."""

    load_options = LOAD_OPTIONS

    def warm(self, context: LoadContext | None = None) -> None:
        warm_compile_workers(context)

    def load(self, program: Program, options: CompileOptions,
             context: LoadContext | None = None) -> Callable[[list], list]:
        from .launch import load_launch

        return load_launch(verify(program), options, context)  # a stage checks its input document


class CudaGraphRuntime:
    """Captures a Program into a CUDA Graph and replays it; runs as 'launch' without CUDA."""

    load_options = LOAD_OPTIONS

    def warm(self, context: LoadContext | None = None) -> None:
        warm_compile_workers(context)

    def load(self, program: Program, options: CompileOptions,
             context: LoadContext | None = None) -> Callable[[list], list]:
        from .cudagraph import load_cudagraph

        return load_cudagraph(verify(program), options, context)

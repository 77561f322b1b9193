"""The runtime stage objects registered with pipec (they import torch/triton only in `load`)."""

from __future__ import annotations

from collections.abc import Callable

from pipec_ir import CompileOptions, LoadContext, Program, verify

# The options these runtimes read only when they load a Program (README: dynamic shapes,
# autotuning, the GEMM choice). They cannot change what capture, fusion or codegen produce,
# so the front end leaves them out of cache keys (`CompileOptions.key(exclude=...)`).
LOAD_OPTIONS = frozenset({"recompile_limit", "bucket", "choice", "autotune_configs", "specialize", "tuning_table"})


class LaunchRuntime:
    """Runs a Program's steps one after the other (Triton's interpreter without CUDA)."""

    load_options = LOAD_OPTIONS

    def load(self, program: Program, options: CompileOptions,
             context: LoadContext | None = None) -> Callable[[list], list]:
        from .launch import load_launch

        return load_launch(verify(program), options, context)  # a stage checks its input document


class CudaGraphRuntime:
    """Captures a Program into a CUDA Graph and replays it; runs as 'launch' without CUDA."""

    load_options = LOAD_OPTIONS

    def load(self, program: Program, options: CompileOptions,
             context: LoadContext | None = None) -> Callable[[list], list]:
        from .cudagraph import load_cudagraph

        return load_cudagraph(verify(program), options, context)

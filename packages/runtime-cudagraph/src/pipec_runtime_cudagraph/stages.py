"""The runtime stage objects registered with pipec (they import torch/triton only in `load`)."""

from __future__ import annotations

from collections.abc import Callable

from pipec_ir import CompileOptions, Program, verify


class LaunchRuntime:
    """Runs a Program's steps one after the other (Triton's interpreter without CUDA)."""

    def load(self, program: Program, options: CompileOptions) -> Callable[[list], list]:
        from .launch import load_launch

        return load_launch(verify(program), options)  # a stage checks its input document


class CudaGraphRuntime:
    """Captures a Program into a CUDA Graph and replays it; runs as 'launch' without CUDA."""

    def load(self, program: Program, options: CompileOptions) -> Callable[[list], list]:
        from .cudagraph import load_cudagraph

        return load_cudagraph(verify(program), options)

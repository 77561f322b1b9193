"""pipec plugin: registers the "launch" and "cudagraph" runtimes."""

from __future__ import annotations

import pipec_ir

from .stages import CudaGraphRuntime, LaunchRuntime


@pipec_ir.hookimpl
def pipec_register(registry) -> None:
    registry.add_runtime("launch", LaunchRuntime())
    registry.add_runtime("cudagraph", CudaGraphRuntime())

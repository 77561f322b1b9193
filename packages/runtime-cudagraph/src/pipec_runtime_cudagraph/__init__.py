"""pipec_runtime_cudagraph: pipec's runtimes for a `Program`.

* ``launch`` — runs the steps one after the other: Triton kernels (through Triton's
  interpreter when there is no CUDA device) and ATen extern calls.
* ``cudagraph`` — on CUDA, captures the whole step list once into a CUDA Graph and
  replays it; elsewhere (or when capture fails) it runs as ``launch``.
* ``load_artifact(path)`` — runs a ``.pipec`` file written by ``pipec export`` (see
  ``bundle``, the file format): this package alone, no capture, fusion, codegen or Dynamo.

Importing this package is cheap: torch and triton are imported only when a program
is loaded (the plugin is imported by ``pipec plugins`` too).
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {
    "load_launch": "launch",
    "ProgramRunner": "launch",
    "load_cudagraph": "cudagraph",
    "CudaGraphProgram": "cudagraph",
    "interpreter_active": "interpreter",
    "enable_interpreter": "interpreter",
    "INTERPRETER_MESSAGE": "interpreter",
    "load_kernel": "kernels",
    "kernel_cache_dir": "kernels",
    "plan_check": "memory",
    "MemoryPlanError": "memory",
    "LaunchRuntime": "stages",
    "CudaGraphRuntime": "stages",
    "load_artifact": "bundle_loader",
    "LoadedArtifact": "bundle_loader",
    "read_artifact": "bundle",
    "ArtifactError": "bundle",
    "ArtifactInputError": "bundle",
    "TamperedArtifactError": "bundle",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value

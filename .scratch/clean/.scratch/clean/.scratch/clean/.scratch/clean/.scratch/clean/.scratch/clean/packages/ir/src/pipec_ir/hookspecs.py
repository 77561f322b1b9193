"""pluggy hook specifications: the plugin contract (project name and entry-point group `pipec`)."""

from __future__ import annotations

import pluggy

PROJECT = "pipec"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def pipec_register(registry: Registry) -> None:  # noqa: F821
    """Add named stage implementations:
    registry.add_capture(name, impl), registry.add_fusion(name, impl),
    registry.add_codegen(name, impl), registry.add_runtime(name, impl),
    registry.add_cache(name, impl)."""


@hookspec
def pipec_stage_finished(stage: str, name: str, document: object, seconds: float) -> None:
    """Observer: called after each stage with its output document."""

"""pluggy hook specifications: the plugin contract (project name and entry-point group `pipec`).

A plugin is a module (or object) named by an entry point in group `pipec`, holding any of
these hooks, each marked with `pipec_ir.hookimpl`. The plugin loader (`pipec.plugins`) calls
them in this order, once per process (docs/plugins.md has the whole contract):

1. `pipec_register(registry)` of every plugin: add stage implementations;
2. `pipec_configure(registry)` of every plugin, once all have registered: wrap or replace
   what others registered;
3. `pipec_stage_finished(...)` after each stage of each compilation: observe.

Within steps 1 and 2 the order is: hooks marked `tryfirst=True`, then the others, then those
marked `trylast=True`; within each of those tiers the built-in distributions first, then
third-party plugins sorted by distribution name and entry-point name, then plugins registered
in-process (`pipec.plugins.register_plugin`) in the order they were registered. A name
registered twice keeps the later implementation (with a warning), so a plugin replaces a
built-in simply by registering the same name, and a `trylast` plugin's choice wins over
everyone's. Hook wrappers (`hookwrapper=True` / `wrapper=True`) are refused for these two
hooks: wrap a stage with `Registry.wrap` in `pipec_configure` instead.
Step 3 is pluggy's own call: `tryfirst`, then the others latest-registered first, then `trylast`.
"""

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
    registry.add_cache(name, impl).

    Other plugins may not have registered yet: look nothing up here (use `pipec_configure`),
    and never call `pipec.get_registry()` from a hook (it raises: the registry is being built).
    A hook that raises is named in one warning, its plugin is listed as failed by
    `pipec plugins`, and what it had added is dropped."""


@hookspec
def pipec_configure(registry: Registry) -> None:  # noqa: F821
    """Called once every plugin's `pipec_register` has run (like pytest's `pytest_configure`).

    The registry now holds every stage: wrap one with
    `registry.wrap(stage, name, lambda inner: Wrapper(inner))` (the entry keeps its name and
    distribution and records the wrapping plugin), replace one with `registry.add_*`, or read
    what is there. A hook that raises is named in one warning and its changes are undone."""


@hookspec
def pipec_stage_finished(stage: str, name: str, document: object, seconds: float) -> None:
    """Observer: called after each stage with its output document.

    `stage` is "capture", "fusion", "codegen" or "runtime"; `name` is the graph's name;
    `document` is the stage's `Graph`, `KernelPlan` or `Program` (for the runtime, the
    loaded callable); `seconds` is the stage's wall time. An observer that raises costs a
    warning, never the compilation."""

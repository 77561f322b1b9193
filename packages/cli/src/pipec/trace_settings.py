"""The torch settings a pipec-compiled model is traced under, set only while Dynamo compiles.

Dynamo reads these settings while it converts a frame (a first compile or a recompile), never
while it replays a compiled frame. Setting and restoring them around every call costs more
than the rest of a small call (torch's config modules are slow to write; docs/performance.md,
"Trace settings are applied only while Dynamo compiles"), so a call
only marks this thread as running a pipec model (`_Calling`), and a Dynamo compile-start
callback applies that model's settings, its end callback restores them.
Where torch lacks the callback hooks, each call sets and restores them itself (`_Swapping`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pipec_ir import CompileOptions, RecompileBudget

Setting = tuple[object, str, object]  # (config module, attribute, value)

class _PerThread(threading.local):
    def __init__(self) -> None:
        self.calls: list[Callable[[], list[Setting]]] = []  # settings of the pipec models being called
        self.undo: list[list[Setting]] = []  # what a running compile (or a _Swapping call) restores


_thread = _PerThread()


def call_settings(options: CompileOptions, budget: RecompileBudget) -> list[Setting]:
    """The settings, as (config module, name, value).

    * Dynamo's own recompile limit is raised past pipec's budget, so pipec's budget is the
      one enforced (until it is used up; then Dynamo's applies again and runs the rest eagerly).
    * Sizes follow torch.compile: a dynamic size is assumed >= 2 (a guard), and a call at 0 or 1
      compiles its own graph (Dynamo's 0/1 specialization). `size_oblivious=True` opts into
      torch's size-oblivious tracing instead: one graph serves batch 1 and batch 1000, but torch
      then decides `x.squeeze(0)`, broadcasting and the like as if the size were never 1, with no
      guard, so a model whose result depends on a dynamic size being 1 is silently wrong there
      (api.py warns when it is asked for).
    * Python floats are specialized (specialize_float=False keeps torch's default): they are
      literals in the kernels, not 0-dim tensor inputs, which also spares Dynamo a restarted
      analysis (a second backend call) per compile.
    * Once-only logger methods (`logging.Logger.warning_once` / `info_once`, which transformers
      adds: cached functions Dynamo cannot trace) are no-ops while Dynamo traces, as every
      logging call is under torch.export: a one-time notice is not worth a graph break.
      transformers' `loss_function` property warns once whenever a config names no loss type,
      which cut every language model's loss off from its head (GPT-2's padded vocabulary,
      capture `vocab_padding.py`, needs both in one graph). `trace_once_logging=True` keeps them.
    """
    import torch
    from torch.fx.experimental import _config as fx_config

    settings = []
    if not budget.exhausted:
        # the first compilation, the recompiles, and the one that is refused
        settings.append((torch._dynamo.config, "recompile_limit", budget.limit + 2))
    if size_oblivious(options):
        settings.append((fx_config, "backed_size_oblivious", True))
    if options.get("specialize_float", True):
        settings.append((torch._dynamo.config, "specialize_float", True))
    once = once_logging_functions()
    if once and not options.get("trace_once_logging", False) and hasattr(torch._dynamo.config, "ignore_logger_methods"):
        ignored = set(torch._dynamo.config.ignore_logger_methods)
        if not once <= ignored:
            settings.append((torch._dynamo.config, "ignore_logger_methods", ignored | once))
    return settings


def once_logging_functions() -> set:
    """The once-only methods some library added to `logging.Logger` (transformers:
    `warning_once`, `info_once`), present in this process."""
    import logging

    return {f for f in (getattr(logging.Logger, name, None) for name in ("warning_once", "info_once"))
            if f is not None}


def size_oblivious(options: CompileOptions) -> bool:
    """Whether `options` ask for size-oblivious tracing (off by default: see call_settings)."""
    return options.dynamic is not False and bool(options.get("size_oblivious", False))


def apply(settings: list[Setting]) -> list[Setting]:
    """Set what differs; returns what to restore. Plain attribute swaps: `config.patch()`
    builds a context-manager class per use."""
    undo = []
    for module, name, value in settings:
        old = getattr(module, name)
        if name == "recompile_limit" and old >= value:
            continue
        if old != value:
            undo.append((module, name, old))
            setattr(module, name, value)
    return undo


def restore(undo: list[Setting]) -> None:
    for module, name, old in reversed(undo):
        setattr(module, name, old)


def _on_compile_start(_args) -> None:
    # the innermost pipec model being called on this thread is the one Dynamo compiles
    _thread.undo.append(apply(_thread.calls[-1]()) if _thread.calls else [])


def _on_compile_end(_args) -> None:
    if _thread.undo:
        restore(_thread.undo.pop())


def _dynamo_callbacks():
    """torch._dynamo's compile callback handler, or None where this torch has none."""
    import torch

    handler = getattr(torch._dynamo, "callback_handler", None)
    if handler is None or not hasattr(handler, "register_start_callback"):
        return None
    return handler


def settings_scope(settings: Callable[[], list[Setting]]):
    """A context manager for one model's calls: inside it, any Dynamo compile runs under
    `settings()` (re-read per compile: the budget may have run out since)."""
    handler = _dynamo_callbacks()
    return _Calling(settings, handler) if handler is not None else _Swapping(settings)


class _Calling:
    """Marks this thread as calling the model (a class, not a generator: this is per call)."""

    def __init__(self, settings: Callable[[], list[Setting]], handler) -> None:
        self.settings, self.handler = settings, handler

    def __enter__(self) -> None:
        if _on_compile_start not in self.handler.start_callbacks:  # once; again after a clear()
            self.handler.register_start_callback(_on_compile_start)
            self.handler.register_end_callback(_on_compile_end)
        _thread.calls.append(self.settings)

    def __exit__(self, *exc) -> None:
        _thread.calls.pop()


class _Swapping:
    """Sets the settings around the whole call (torch without compile callbacks)."""

    def __init__(self, settings: Callable[[], list[Setting]]) -> None:
        self.settings = settings

    def __enter__(self) -> None:
        _thread.undo.append(apply(self.settings()))

    def __exit__(self, *exc) -> None:
        restore(_thread.undo.pop())

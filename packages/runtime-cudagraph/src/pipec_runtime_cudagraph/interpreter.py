"""Triton's interpreter (``TRITON_INTERPRET=1``): how kernels run when there is no CUDA device.

Triton decides at *decoration* time: ``triton.jit`` returns an ``InterpretedFunction``
instead of a ``JITFunction`` when the interpreter is on. Triton >= 3.4 reads
``triton.knobs.runtime.interpret`` (an env-backed knob that re-reads
``TRITON_INTERPRET`` on every access unless it was assigned in Python); older 3.x read
``os.getenv("TRITON_INTERPRET") == "1"``. The interpreter also reads the knob while
running (constexpr functions), so an interpreted kernel must run with it still on.

The catch: triton.language's own library functions (``tl.sum``, ``tl.max``,
``tl.cdiv``, ``tl.softmax``, ...) are ``@triton.jit`` functions decorated when
``triton.language`` is first imported. If triton was imported before the variable was
set, they are ``JITFunction``s and an interpreted kernel calling them fails with
"Cannot call @triton.jit'd outside of the scope of a kernel". So `enable_interpreter`
sets the variable before importing triton when it can, and otherwise swaps those
functions for interpreted twins (`_interpreted_language`).

Policy: with no CUDA device the runtime turns the interpreter on for the whole process
(`enable_interpreter`), once, with one log message. On a CUDA machine a program fed
CPU tensors runs on the GPU and hands back CPU tensors (`launch`): triton < 3.7's
interpreter leaves triton.language patched, which breaks later GPU compiles.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

ENV = "TRITON_INTERPRET"
INTERPRETER_MESSAGE = "no CUDA device: running kernels in Triton's interpreter"

log = logging.getLogger("pipec.runtime")
_lock = threading.RLock()
_announced = False
_MISSING = object()
_twins: dict[int, object] = {}  # id(JITFunction) -> its InterpretedFunction twin


def _knobs_runtime():
    """`triton.knobs.runtime` on triton >= 3.4, else None (imports triton)."""
    try:
        from triton import knobs
    except ImportError:
        return None
    runtime = getattr(knobs, "runtime", None)
    if runtime is None or not hasattr(type(runtime), "interpret"):
        return None
    return runtime


def _env_on() -> bool:
    return os.environ.get(ENV, "0").lower() in ("1", "true", "yes", "on", "y")


def interpreter_active() -> bool:
    """Whether a kernel decorated now would run in Triton's interpreter."""
    if "triton" not in sys.modules:  # do not import triton just to look
        return os.environ.get(ENV, "0") == "1"
    runtime = _knobs_runtime()
    if runtime is not None:
        return bool(runtime.interpret)
    return os.environ.get(ENV, "0") == "1"


def _set(on: bool) -> None:
    os.environ[ENV] = "1" if on else "0"
    if "triton" in sys.modules:
        runtime = _knobs_runtime()
        if runtime is not None and "interpret" in runtime.__dict__:
            # someone assigned the knob in Python: it shadows the environment variable
            runtime.__dict__["interpret"] = on


def _language_patches() -> list[tuple[object, str, object]]:
    """(owner, attribute, interpreted twin) for every library JITFunction in triton.language."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    owners = [m for name, m in sys.modules.items()
              if m is not None and (name == "triton.language" or name.startswith("triton.language."))]
    owners.append(tl.core.tensor)
    patches = []
    for owner in owners:
        for attr, value in list(vars(owner).items()):
            if isinstance(value, JITFunction) and not isinstance(value, InterpretedFunction):
                twin = _twins.get(id(value))
                if twin is None:
                    twin = _twins[id(value)] = InterpretedFunction(value.fn)
                    twin._pipec_original = value
                patches.append((owner, attr, twin))
    return patches


def _swap(patches) -> list[tuple[object, str, object]]:
    undo = []
    for owner, attr, value in patches:
        undo.append((owner, attr, vars(owner)[attr]))
        setattr(owner, attr, value)
    return undo


def enable_interpreter() -> None:
    """Turn Triton's interpreter on for this process (no CUDA device); says so once."""
    global _announced
    with _lock:
        if not _env_on() or not interpreter_active():
            _set(True)
        if "triton" in sys.modules:
            # triton.language was imported before: its library functions are compiled-mode
            _swap(_language_patches())
        if not _announced:
            _announced = True
            log.warning(INTERPRETER_MESSAGE)


@contextlib.contextmanager
def interpreter_scope(on: bool = True):
    """Temporarily switch the interpreter on (decorating and running kernels for CPU
    tensors on a machine that also has CUDA)."""
    with _lock:
        if interpreter_active() == on:
            yield
            return
        saved_env = os.environ.get(ENV)
        runtime = _knobs_runtime()
        saved_knob = runtime.__dict__.get("interpret", _MISSING) if runtime is not None else _MISSING
        _set(on)
        undo = _swap(_language_patches()) if on else []
        try:
            yield
        finally:
            _swap(reversed(undo))
            if saved_env is None:
                os.environ.pop(ENV, None)
            else:
                os.environ[ENV] = saved_env
            if runtime is not None:
                if saved_knob is _MISSING:
                    runtime.__dict__.pop("interpret", None)
                else:
                    runtime.__dict__["interpret"] = saved_knob


def ieee_quiet():
    """Run an interpreted kernel as the GPU (and eager torch) runs it: IEEE overflow, division by
    zero and NaN results are values, not events. The interpreter computes with numpy, which warns
    on each ("overflow encountered in add" for a padding mask's finfo.min + finfo.min, "divide by
    zero encountered in log" for T5's relative position buckets): noise a CPU user would read as
    pipec's fault, from results that equal eager's."""
    import numpy as np

    return np.errstate(over="ignore", divide="ignore", invalid="ignore", under="ignore")


def honour_debug(fn):
    """`fn`, or, for an interpreted kernel decorated ``@triton.jit(debug=True)`` (codegen's
    bounds-checked kernels), `fn` run with the interpreter's debug mode on: compiled Triton
    keeps `tl.device_assert` in debug kernels, the interpreter ignores the decorator's flag and
    drops every assertion unless its builder's options say debug."""
    if not getattr(fn, "kwargs", {}).get("debug"):
        return fn
    return _DebugKernel(fn)


class _DebugKernel:
    """An InterpretedFunction whose runs see the interpreter's debug mode on (`honour_debug`)."""

    def __init__(self, fn):
        self.fn = fn

    def __getattr__(self, name):
        return getattr(self.fn, name)

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.run(*args, grid=grid, warmup=False, **kwargs)

    def run(self, *args, **kwargs):
        with interpreter_debug():
            return self.fn.run(*args, **kwargs)


@contextlib.contextmanager
def interpreter_debug():
    """The interpreter's builder in debug mode (device assertions run) for the duration."""
    import dataclasses

    from triton.runtime import interpreter

    builder = getattr(interpreter, "interpreter_builder", None)
    options = getattr(builder, "options", None)
    if options is None or not hasattr(options, "debug") or options.debug:
        yield  # already on, or a Triton whose interpreter has no such option
        return
    with _lock:
        builder.options = dataclasses.replace(options, debug=True)
        try:
            yield
        finally:
            builder.options = options

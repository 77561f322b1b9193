"""Launching a compiled Triton kernel without `JITFunction.run`'s per-call work.

`fn[grid](*args, **kwargs)` binds the arguments, computes the specialization key,
looks the compiled kernel up and checks the kernel's globals on every call (tens of
microseconds). It returns the `CompiledKernel`; with Triton >= 3.4 (the `knobs`
module; checked on 3.6 and 3.9) the call it ends in is

    kernel.run(grid0, grid1, grid2, stream, kernel.function, kernel.packed_metadata,
               launch_metadata, launch_enter_hook, launch_exit_hook, *all_arguments)

with every argument, constexprs included, in the kernel's signature order. Once a
kernel is compiled for a device, config and integer sizes, `bind_launcher` makes
that call with the grid, sizes and constexprs bound (as Inductor's CachingAutotuner
does), or, cheaper still, calls torch's C++ launcher on the kernel's cubin where it can
(static_launch.py). A pointer argument that may be misaligned (it comes from the caller or from a
library call, not from the runner's own allocations) is checked: when the kernel
was specialized for a 16-byte-aligned pointer and this one is not, that call goes
through `fn[grid]` (which compiles the right variant). With launch hooks set
(profilers) or an older Triton, there is no fast path.
"""

from __future__ import annotations

import inspect
import re

from .static_launch import SCRATCH_SLOT, static_launch_call

ALIGN_MASK = 15
_NAMES = r"\b[A-Z][A-Z_]*\b"  # the namespace entries a generated launch names
_TOKENS = r"\b(?:[pq]\d+|[A-Z][A-Z_]*)\b"  # those, the pointer placeholders and their checked addresses


_MISSING = object()
_runtime = _MISSING


def _knobs_runtime():
    """`triton.knobs.runtime` (looked up once), or None before Triton 3.4."""
    global _runtime
    if _runtime is _MISSING:
        try:
            from triton import knobs
        except ImportError:
            _runtime = None
        else:
            _runtime = getattr(knobs, "runtime", None)
    return _runtime


def _hook_set(hook) -> bool:
    # newer Triton keeps a `HookChain` there at all times: set means it holds calls
    calls = getattr(hook, "calls", None)
    return hook is not None and (calls is None or bool(calls))


def hooks_active() -> bool:
    """Whether Triton launch hooks are set (profilers): then every launch takes `fn[grid]`."""
    runtime = _knobs_runtime()
    if runtime is None:
        return True
    return _hook_set(runtime.launch_enter_hook) or _hook_set(runtime.launch_exit_hook)


def fast_path_available() -> bool:
    return _knobs_runtime() is not None


def signature_values(fn, positional: tuple, constants: dict) -> tuple | None:
    """Every argument of `fn` in signature order (positional first, then by name, then
    defaults); None when one is missing."""
    names = list(getattr(fn, "arg_names", ()))
    if not names:
        return None
    values = dict(zip(names, positional))
    values.update(constants)
    params = fn.signature.parameters
    out = []
    for name in names:
        if name in values:
            out.append(values[name])
        elif params[name].default is not inspect.Parameter.empty:
            out.append(params[name].default)
        else:
            return None
    return tuple(out)


def launch_values(fn, sizes, constants: dict, nptrs: int) -> tuple | None:
    """Every argument of a launch of `fn` in signature order, its `nptrs` pointers first as the
    placeholders p0, p1, ..., then `sizes` and the `constants`; None where they do not fit."""
    placeholders = tuple(f"p{i}" for i in range(nptrs))
    values = signature_values(fn, placeholders + tuple(sizes), constants)
    return values if values is not None and values[:nptrs] == placeholders else None


def bind_launcher(kernel, fn, grid: tuple, sizes: tuple, constants: dict, nptrs: int,
                  check: tuple[int, ...], slow, device_index: int | None = None):
    """`f(stream, *pointers)` launching `kernel` (what `fn[grid]` returned) directly, or None:
    through torch's C++ launcher where it can describe the kernel (static_launch.py), else
    through the kernel's own Triton launcher.

    `check`: positions of pointers that must be 16-byte aligned for this kernel and may
    not be; a call where one is not goes to `slow(*pointers)`."""
    try:
        run = kernel.run
        function, metadata = kernel.function, kernel.packed_metadata
    except AttributeError:
        return None
    if function is None:
        return None
    values = launch_values(fn, sizes, constants, nptrs)
    if values is None:
        return None
    namespace = {"RUN": run, "FUNC": function, "META": metadata, "TAIL": values[nptrs:]}
    params = ", ".join(values[:nptrs])
    static = None if device_index is None else static_launch_call(kernel, device_index, values, nptrs)
    if static is not None:
        entries, args = static
        namespace.update(entries)
        call = static_call(grid, entries, args)
    else:
        g = tuple(grid) + (1,) * (3 - len(grid))
        call = f"RUN({g[0]}, {g[1]}, {g[2]}, stream, FUNC, META, None, None, None, {params}, *TAIL)"
    return launch_function(namespace, call, nptrs, check, slow, getattr(fn, "__name__", "kernel"))


def static_call(grid: tuple, entries: dict, args: str) -> str:
    """The statement launching through torch's C++ launcher (static_launch.launch_namespace's
    `entries`; `args`: the argument tuple's expression). A kernel's global scratch is allocated
    per launch, `SCRATCH_BYTES` per program of `grid`; the name `scratch` holds it until the
    launch is queued, after which the caching allocator may hand it out again (to work queued
    behind this launch on the same stream, as with Triton's own launcher)."""
    g = tuple(grid) + (1,) * (3 - len(grid))
    if SCRATCH_SLOT in args:
        args = args.replace(SCRATCH_SLOT, f"(scratch := SCRATCH({entries['SCRATCH_BYTES'] * g[0] * g[1] * g[2]})).data_ptr()")
    return f"LAUNCH(CUFUNC, {g[0]}, {g[1]}, {g[2]}, {entries['WARPS']}, {entries['SHARED']}, {entries['TYS']!r}, {args}, stream)"


def launch_function(namespace: dict, call: str, nptrs: int, check: tuple[int, ...], slow, name: str):
    """`launch(stream, p0, p1, ...)` running `call` (names from `namespace`), with an `inline` form;
    a call where a pointer at a `check` position is not 16-byte aligned goes to `slow(*pointers)`."""
    namespace = {**namespace, "SLOW": slow}
    params = ", ".join(f"p{i}" for i in range(nptrs))
    if check:
        # each checked address is read once (`q<i>`) and passed on from there: `data_ptr()` is a
        # method call, and a convolution net checks a hundred pointers a call
        test = " | ".join(f"(q{i} := p{i}.data_ptr())" for i in check)
        for i in check:
            call = re.sub(rf"\bp{i}\.data_ptr\(\)", f"q{i}", call)
        call = f"SLOW({params}) if ({test}) & {ALIGN_MASK} else {call}"
    exec(compile(f"def launch(stream, {params}):\n    {call}\n", f"<pipec launch {name}>",
                 "exec"), namespace)  # noqa: S102 - generated above
    launch = namespace.pop("launch")
    # what a specialized run writes in its own body instead of calling `launch` (one Python
    # frame less per launch): the call with p0.. as placeholders for the pointers
    named = set(re.findall(_NAMES, call))
    launch.inline = InlineLaunch({k: v for k, v in namespace.items() if k in named}, call)
    return launch


class InlineLaunch:
    """A bound launch as one statement: `call` names the entries of `namespace`, the pointer
    placeholders p0, p1, ... and `stream`."""

    __slots__ = ("namespace", "call")

    def __init__(self, namespace: dict, call: str):
        self.namespace, self.call = namespace, call

    def statement(self, pointers: list[str], const) -> str:
        """The call with `pointers` (names) for p0.., `<pointer>_addr` for the checked addresses
        q0.., and each namespace entry renamed to `const(name, value)` (a name unique in the
        caller's namespace)."""
        names = {k: const(k, v) for k, v in self.namespace.items()}

        def name(m):
            token = m.group(0)
            if token[0] in "pq" and token[1:].isdigit():
                pointer = pointers[int(token[1:])]
                return pointer if token[0] == "p" else f"{pointer}_addr"
            return names.get(token, token)
        return re.sub(_TOKENS, name, self.call)


def current_stream_getter():
    """`f(device_index) -> raw CUDA stream` (torch's private fast accessor when present)."""
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw
    return lambda index: torch.cuda.current_stream(index).cuda_stream


__all__ = ["InlineLaunch", "bind_launcher", "current_stream_getter", "fast_path_available", "hooks_active",
           "launch_function", "launch_values", "static_call"]

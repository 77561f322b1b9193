"""Launching a compiled Triton kernel through torch's C++ launcher instead of Triton's.

Triton's launcher (`CompiledKernel.run`, `CudaLauncher.__call__`) is Python: per call it
builds closures for scratch allocation, asks the profiler allocator, then parses the
arguments in C, calling each tensor's `data_ptr()` and checking it with
`cuPointerGetAttribute`. A training step of BERT base makes ~580 launches, and its host
time per step was 1.2-1.3x Inductor's (docs/performance.md, "Session 9"). Inductor launches
through `torch._C._StaticCudaLauncher` (what `StaticallyLaunchedCudaKernel` wraps): one C
call taking the CUfunction, the grid, a type string and the arguments. pipec does the same
for kernels it can describe to it:

* the cubin is loaded once more, as its own module, by `_load_kernel` (from a file: the
  call takes a path);
* pointers are passed as integers (`data_ptr()`), so no driver call checks them;
* the arguments Triton compiled in as constants (constexprs, integers specialized to 1)
  are dropped, as Triton's own launcher drops them;
* a kernel that makes its tensor descriptors on the device (the TMA GEMMs, tma.py) takes a
  global scratch pointer: each launch allocates `global_scratch_size` bytes per program from
  torch's caching allocator, as Triton's launcher does through the allocator tma.py sets (inside
  CUDA Graph capture, from the graph's pool);
* a kernel this cannot describe (descriptors passed from the host, profile scratch, clusters,
  cooperative or PDL launches, an argument type without a code) keeps Triton's launcher, as do all
  kernels when torch has no such launcher (CPU builds, older torch) or with the compile
  option `static_launch=False` (`PIPEC_STATIC_LAUNCH=0`).
"""

from __future__ import annotations

import contextlib
import math
import os
import tempfile

SCRATCH_ALIGN = 512  # torch's caching allocator starts every block on a 512-byte boundary
SCRATCH_SLOT = "SCRATCH_SLOT"  # the global scratch argument in a description, until the grid is known (fastlaunch.static_call)

# Triton signature type -> the launcher's type code (torch's static launcher parses these).
_TYPE_CODES = {
    "i1": "i", "i8": "b", "i16": "h", "i32": "i", "i64": "l",
    "u1": "I", "u8": "B", "u16": "H", "u32": "I", "u64": "K",
    "fp16": "f", "bf16": "f", "fp32": "f", "f32": "f", "fp64": "d",
}


def static_launcher_impl():
    """`torch._C._StaticCudaLauncher`, or None (CPU build, older torch)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - the runtime needs torch
        return None
    return getattr(torch._C, "_StaticCudaLauncher", None)


def _meta(kernel, name, default=None):
    return getattr(kernel.metadata, name, default)


def describable(kernel) -> str | None:
    """Why `kernel` cannot go through the static launcher, or None when it can."""
    if "cubin" not in getattr(kernel, "asm", {}):
        return "no cubin"
    if getattr(kernel, "src", None) is None or not hasattr(kernel.src, "signature"):
        return "no source signature"
    if (_meta(kernel, "num_ctas", 1) or 1) != 1:
        return "several CTAs per program"
    cluster = _meta(kernel, "cluster_dims", (1, 1, 1)) or (1, 1, 1)
    if any(int(c) != 1 for c in cluster):
        return "a cluster launch"
    for flag in ("launch_cooperative_grid", "launch_pdl"):
        if _meta(kernel, flag, False):
            return flag
    if _meta(kernel, "tensordesc_meta", None):
        return "tensor descriptors"
    if (_meta(kernel, "profile_scratch_size", 0) or 0) > 0:
        return "profile_scratch_size"
    if (_meta(kernel, "global_scratch_size", 0) or 0) > 0 and (_meta(kernel, "global_scratch_align", 1) or 1) > SCRATCH_ALIGN:
        return "global scratch aligned past the caching allocator's 512 bytes"
    return None


def argument_codes(kernel) -> tuple[str, tuple[int, ...]] | None:
    """(type codes of the arguments the cubin takes, their positions in the kernel's signature),
    or None when one has no code. Constexprs and Triton's specialized constants are dropped."""
    src = kernel.src
    names = list(getattr(src.fn, "arg_names", ()))

    def position(key):
        if isinstance(key, str):
            return names.index(key)
        if isinstance(key, tuple):
            return key[0]
        return key

    signature = {position(k): v for k, v in src.signature.items()}
    constants = {position(k) for k in getattr(src, "constants", {})}
    codes, kept = [], []
    for i in sorted(signature):
        ty = signature[i]
        if ty == "constexpr" or i in constants:
            continue
        code = "O" if isinstance(ty, str) and ty.startswith("*") else _TYPE_CODES.get(ty)
        if code is None:
            return None
        codes.append(code)
        kept.append(i)
    return "".join(codes), tuple(kept)


def _write_cubin(kernel) -> str:
    fd, path = tempfile.mkstemp(prefix="pipec-", suffix=".cubin")  # removed once loaded
    with os.fdopen(fd, "wb") as f:
        f.write(kernel.asm["cubin"])
    return path


def load_function(impl, kernel, device_index: int) -> int:
    """The CUfunction of `kernel`'s cubin loaded on `device_index` (a module of its own), loaded
    once per kernel and device: the kernel object keeps it, as every launch of it (twelve layers'
    worth, every specialized run) binds the same function."""
    functions = getattr(kernel, "_pipec_cufunctions", None)
    if functions is None:
        functions = {}
        with contextlib.suppress(AttributeError):  # a kernel object that takes no attribute loads each time
            kernel._pipec_cufunctions = functions
    if device_index not in functions:
        path = _write_cubin(kernel)
        try:
            functions[device_index] = load_cubin(impl, path, kernel.metadata.name, int(_shared(kernel)), device_index)
        finally:
            os.unlink(path)
    return functions[device_index]


def load_cubin(impl, path: str, name: str, shared: int, device_index: int) -> int:
    """The CUfunction `name` of the cubin file at `path`, loaded on `device_index` as a module of
    its own by torch's launcher `impl`."""
    import torch

    with torch.cuda.device(device_index):
        loaded = impl._load_kernel(path, name, shared, device_index)
    # older torch returns (function, n_regs, n_spills); newer (module, function, n_regs, n_spills)
    return loaded[0] if len(loaded) == 3 else loaded[1]


def _shared(kernel) -> int:
    return getattr(kernel, "shared", None) or _meta(kernel, "shared", 0) or 0


def static_description(kernel, values: tuple, nptrs: int) -> dict | None:
    """How torch's launcher calls `kernel`, loading nothing: {"types": the argument type codes,
    "args": the argument tuple's expressions (p<i>.data_ptr() for pointer i, literals for sizes and
    scalars, C[k] for the k-th of "consts"), "consts", "warps", "shared"}; None where the kernel
    keeps Triton's launcher. `values`: every argument in signature order, the first `nptrs` of them
    the placeholders p0.. of the pointers."""
    if static_launcher_impl() is None or describable(kernel) is not None:
        return None
    described = argument_codes(kernel)
    if described is None:
        return None
    codes, kept = described
    # the scratch pointers the kernel takes: null where it needs none (profile scratch always, as
    # describable checked), else the slot static_call fills with a fresh allocation per launch
    scratch = int(_meta(kernel, "global_scratch_size", 0) or 0)
    slots = [("0" if name == "profile_scratch_size" or not scratch else SCRATCH_SLOT)
             for name in ("global_scratch_size", "profile_scratch_size") if hasattr(kernel.metadata, name)]
    args, consts = [], []
    for i in kept:
        if i < nptrs:
            args.append(f"p{i}.data_ptr()")
        elif type(values[i]) in (int, bool) or (type(values[i]) is float and math.isfinite(values[i])):
            # sizes and scalars: literals in the generated source
            args.append(repr(values[i]))
        else:
            consts.append(values[i])
            args.append(f"C[{len(consts) - 1}]")
    args.extend(slots)
    return {"types": codes + "O" * len(slots), "args": "(" + ", ".join(args) + ("," if len(args) == 1 else "") + ")",
            "consts": tuple(consts), "warps": int(kernel.metadata.num_warps), "shared": int(_shared(kernel)),
            "scratch": scratch}


def scratch_memory(size: int):
    """`size` bytes of global scratch on the current device, from the caching allocator (which
    aligns to 512 bytes; inside CUDA Graph capture it allocates from the graph's pool). Both
    launchers' scratch comes from here: this one's, and Triton's through tma.py's allocator."""
    import torch

    return torch.empty(size, dtype=torch.int8, device="cuda")


def launch_namespace(function: int, described: dict) -> dict:
    """The generated launcher's namespace entries for a loaded `function` (static_description)."""
    entries = {"LAUNCH": static_launcher_impl()._launch_kernel, "CUFUNC": function, "WARPS": described["warps"],
               "SHARED": described["shared"], "TYS": described["types"], "C": described["consts"]}
    if described.get("scratch"):
        entries.update(SCRATCH=scratch_memory, SCRATCH_BYTES=described["scratch"])
    return entries


def static_launch_call(kernel, device_index: int, values: tuple, nptrs: int):
    """(namespace entries, argument tuple expression) for the generated launcher, or
    None where the kernel keeps Triton's launcher (static_description)."""
    described = static_description(kernel, values, nptrs)
    if described is None:
        return None
    try:
        function = load_function(static_launcher_impl(), kernel, device_index)
    except Exception:  # noqa: BLE001 - a kernel the C launcher cannot load keeps Triton's
        return None
    return launch_namespace(function, described), described["args"]


__all__ = ["SCRATCH_SLOT", "argument_codes", "describable", "launch_namespace", "load_cubin", "scratch_memory",
           "static_description", "static_launch_call", "static_launcher_impl"]

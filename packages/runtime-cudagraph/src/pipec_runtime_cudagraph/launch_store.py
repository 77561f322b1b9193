"""Launching a kernel an earlier process compiled, without Triton (the warm path).

A warm compile of BERT base training (pipec's, Triton's and AOTAutograd's caches full) spent
2.0-2.3 s beyond tracing on the H100, about 1 s of it in Triton (docs/performance.md, "Session
32"): importing the 113 kernel modules (`@triton.jit` reads each function's source back, 0.4-0.6
s), Triton's cache lookups (hashing each kernel's source and what it calls, reading its metadata
and cubin: 0.5 s) and the first launches through `fn[grid]`. Inductor skips Triton there: it keeps
its cubins and launches them through torch's C++ launcher. pipec now does the same:

* a launch that goes through torch's launcher (static_launch.py) is recorded once, in the kernel
  directory (`launches/<key>.json` and `.cubin`): the cubin and how the launcher calls it (the
  function's name, warps, shared memory, argument type codes, the argument tuple: pointers and
  literal sizes);
* the key names everything the cubin was built from: the kernel's source and config (its body
  digest and launch keywords), the sizes and the pointers' dtypes and 16-byte alignment it was
  specialized for, the GPU's architecture, Triton's version and the environment variables
  Triton's own cache keys read;
* a later launch with that key loads the cubin itself (a module of its own, once per device) and
  launches it. The kernel's Python module is not imported and Triton does not run, unless
  something else needs them: a config to time, a key not recorded, a misaligned pointer;
* only launches whose sizes are known when the program loads (no size symbols) are recorded: a
  record holds one size, and a generation loop's growing length would write one per step where
  Triton's one compile serves every length.

Off with the option `launch_store=False` (`PIPEC_LAUNCH_STORE=0` in pipec's front end), with `static_launch=False`,
and wherever torch has no C++ launcher (CPU builds, older torch) or the interpreter runs.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from pathlib import Path

from .files import atomic_write
from .static_launch import launch_namespace, load_cubin, static_description, static_launcher_impl

FORMAT = 1


def _environment() -> str:
    """Triton's version and the variables Triton itself says change what it compiles (what its
    own cache keys read: `get_cache_invalidating_env_vars`, as the compile workers are given)."""
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars

    return f"triton {triton.__version__} {sorted(dict(get_cache_invalidating_env_vars()).items())!r}"


class StoredLaunch:
    """One recorded kernel: launched through torch's C++ launcher from its own cubin file."""

    __slots__ = ("name", "described", "cubin", "functions", "launches")

    def __init__(self, name: str, described: dict, cubin: Path):
        self.name, self.described, self.cubin = name, described, cubin
        self.functions: dict[int, int] = {}  # device index -> CUfunction
        self.launches: dict[tuple, object] = {}  # (grid, pointers, device index) -> unchecked launch

    def function(self, device_index: int) -> int:
        """The kernel's CUfunction on `device_index`, its cubin loaded once per device."""
        if device_index not in self.functions:
            self.functions[device_index] = load_cubin(static_launcher_impl(), str(self.cubin), self.name,
                                                      self.described["shared"], device_index)
        return self.functions[device_index]

    def bind(self, grid: tuple, nptrs: int, check: tuple[int, ...], slow, device_index: int):
        """`launch(stream, *pointers)` (fastlaunch.launch_function) at `grid` on `device_index`; a
        call with a pointer at a `check` position not 16-byte aligned goes to `slow(*pointers)`."""
        from .fastlaunch import launch_function, static_call

        entries = launch_namespace(self.function(device_index), self.described)
        return launch_function(entries, static_call(grid, entries, self.described["args"]), nptrs, check, slow,
                               self.name)

    def launcher(self, grid: tuple, nptrs: int, device_index: int):
        """`bind` without checks, made once per grid and device: for calls whose pointers the caller
        matched against the record's key (steps.LaunchStep.__call__)."""
        at = (tuple(grid), nptrs, device_index)
        launch = self.launches.get(at)
        if launch is None:
            launch = self.launches[at] = self.bind(grid, nptrs, (), None, device_index)
        return launch


class LaunchStore:
    """The recorded launches of one kernel directory (module docstring), with this process's
    lookups remembered (a key not recorded is looked for once)."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        self._found: dict[str, StoredLaunch | None] = {}
        self._environment: str | None = None
        self._capabilities: dict[int, tuple[int, int]] = {}

    def key(self, body: str, kwargs: dict, sizes: tuple, pointers: list, device) -> str:
        """The record's name for a launch of the kernel with body digest `body` (kernels.body_digest)
        and launch keywords `kwargs` at `sizes` with `pointers` (their tensors) on `device`."""
        import torch

        index = device.index if device.index is not None else torch.cuda.current_device()
        if index not in self._capabilities:
            self._capabilities[index] = torch.cuda.get_device_capability(index)
        if self._environment is None:
            self._environment = _environment()
        ptrs = tuple(f"{t.dtype}:{0 if t.data_ptr() & 15 else 16}" for t in pointers)
        text = repr((FORMAT, body, sorted(kwargs.items()), tuple(sizes), ptrs, self._capabilities[index],
                     self._environment))
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, key: str) -> StoredLaunch | None:
        if key in self._found:
            return self._found[key]
        found = None
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            record = json.loads((self.directory / f"{key}.json").read_text())
            cubin = self.directory / f"{key}.cubin"
            if record.get("format") == FORMAT and cubin.is_file():
                described = {"types": str(record["types"]), "args": str(record["args"]), "consts": (),
                             "warps": int(record["warps"]), "shared": int(record["shared"]),
                             "scratch": int(record.get("scratch", 0))}
                found = StoredLaunch(str(record["name"]), described, cubin)
        self._found[key] = found
        return found

    def loads(self, key: str, stored: StoredLaunch, device_index: int) -> bool:
        """Whether `stored` (the record under `key`) loads on `device_index`; one that does not (a
        damaged cubin, a driver that refuses it) is forgotten, so the launch compiles through
        Triton and its record is written again."""
        try:
            stored.function(device_index)
            return True
        except Exception:  # noqa: BLE001 - any failure: Triton compiles it instead
            self._found[key] = None
            return False

    def put(self, key: str, kernel, values: tuple, nptrs: int) -> bool:
        """Record `kernel` (a Triton CompiledKernel, called with `values`: every argument in
        signature order, pointers as placeholders p0..) under `key`, where torch's launcher can
        call it with literal arguments only; whether it was recorded."""
        if self._found.get(key) is not None:
            return True
        described = static_description(kernel, values, nptrs)
        if described is None or described["consts"]:
            return False
        record = {"format": FORMAT, "name": kernel.metadata.name, "types": described["types"],
                  "args": described["args"], "warps": described["warps"], "shared": described["shared"],
                  "scratch": described["scratch"]}
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            cubin = atomic_write(self.directory / f"{key}.cubin", kernel.asm["cubin"])
            atomic_write(self.directory / f"{key}.json", json.dumps(record).encode())  # last: names a whole cubin
        except OSError:
            return False
        self._found[key] = StoredLaunch(record["name"], {**described, "consts": ()}, cubin)
        return True


__all__ = ["LaunchStore", "StoredLaunch"]

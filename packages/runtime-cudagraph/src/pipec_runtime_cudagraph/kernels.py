"""Loading `TritonKernel` sources as real modules (Triton needs a file for `inspect`).

Each source is written once to ``<cache>/<sha256>.py`` (a per-user directory created
0o700, written atomically) and imported with importlib under a unique module name.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.util
import os
import re
import stat
import sys
import tempfile
import threading
from pathlib import Path

from pipec_ir import TritonKernel

from .files import atomic_write
from .interpreter import interpreter_active, interpreter_scope
from .interpreter_math import bind_interpreter_math

_lock = threading.RLock()
_modules: dict[tuple[str, bool, str], tuple[object, str]] = {}  # -> (module, kernel name)
_fallback_dir: Path | None = None


class KernelLoadError(RuntimeError):
    """A kernel source could not be imported or does not define its kernel."""


def default_kernel_dir() -> Path:
    """~/.cache/pipec/kernels: kernel sources, tuning results and the launch store's cubins."""
    return Path.home() / ".cache" / "pipec" / "kernels"


def kernel_cache_dir(override: str | os.PathLike | None = None) -> Path:
    """The directory kernel sources (and tuning results) are written to: `override` (the
    `LoadContext`'s `kernel_dir`; the front end reads $PIPEC_KERNEL_DIR into it), else
    ~/.cache/pipec/kernels.

    A directory that is not ours or is writable by others is not trusted: a private
    temporary directory is used instead.
    """
    global _fallback_dir
    if override is None:
        override = default_kernel_dir()
    path = Path(override)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.stat()
        if st.st_uid == os.getuid() and stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(path, 0o700)
            st = path.stat()
        if st.st_uid == os.getuid() and not stat.S_IMODE(st.st_mode) & 0o022:
            return path
    except OSError:
        pass
    with _lock:
        if _fallback_dir is None:
            _fallback_dir = Path(tempfile.mkdtemp(prefix="pipec-kernels-"))
        return _fallback_dir


def write_source(source: str, directory: Path) -> Path:
    """Write `source` to `<directory>/<sha256>.py` unless an identical file is already there."""
    data = source.encode("utf-8")
    digest = hashlib.sha256(data).hexdigest()
    path = directory / f"{digest}.py"
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    return atomic_write(path, data, prefix=f".{digest[:16]}-")


def load_kernel(kernel: TritonKernel, *, interpret: bool | None = None,
                cache_dir: str | os.PathLike | None = None):
    """The `@triton.jit` function `kernel.name` defined by `kernel.source`.

    `interpret=True` decorates it for Triton's interpreter (default: whatever is active) and
    binds the interpreter's stand-ins for what it cannot run (`interpreter_math`).
    Modules are cached per (source, mode) for the life of the process.
    """
    if interpret is None:
        interpret = interpreter_active()
    interpret = bool(interpret) or interpreter_active()
    digest = body_digest(kernel)
    # keyed by the directory asked for, not the one resolved: resolving stats and may create it,
    # which only a kernel not loaded yet needs (a BERT step's 694 kernels are 70 bodies)
    key = (digest, interpret, str(cache_dir))
    with _lock:
        cached = _modules.get(key)
        if cached is not None:
            # the same body under another name (one per layer of a model): one JITFunction,
            # so Triton compiles it once; it keeps the name it was first loaded under
            module, name = cached
            return getattr(module, name)
        path = write_source(kernel.source, kernel_cache_dir(cache_dir))
        name = f"pipec_kernel_{digest[:32]}{'_interp' if interpret else ''}_{len(_modules)}"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        try:
            with interpreter_scope(True) if interpret else contextlib.nullcontext():
                spec.loader.exec_module(module)
            if interpret:
                bind_interpreter_math(module)
        except Exception as e:
            sys.modules.pop(name, None)
            raise KernelLoadError(
                f"kernel {kernel.name}: its source failed to import ({type(e).__name__}: {e}); "
                f"source at {path}") from e
    fn = getattr(module, kernel.name, None)
    if fn is None or not hasattr(fn, "__getitem__") or not hasattr(fn, "run"):
        raise KernelLoadError(
            f"kernel {kernel.name}: its source does not define a @triton.jit function named {kernel.name!r}")
    with _lock:
        _modules.setdefault(key, (module, kernel.name))
    return fn


_DOCSTRING_LINE = re.compile(r'^[ \t]*"""[^\n]*"""[ \t]*\n', re.MULTILINE)


def body_digest(kernel: TritonKernel) -> str:
    """sha256 of the kernel's source without its name and one-line docstrings (which name
    graph nodes), plus its launch configs: the same kernel of every layer of a model shares it."""
    return _body_digest(kernel.name, kernel.source, tuple(kernel.configs))


@functools.lru_cache(maxsize=8192)  # asked ~6 times per launch step while a program loads
def _body_digest(name: str, source: str, configs: tuple) -> str:
    body = _DOCSTRING_LINE.sub("", source.replace(f"def {name}(", "def \0("))
    return hashlib.sha256(f"{body}\0{configs!r}".encode()).hexdigest()

"""What `pipec bench` does to the process around its measurements (pipec.bench): private caches,
so that a cold compile is cold; a warm-up, so that one-time costs of the process (imports, the
first Dynamo trace, Inductor's compile workers) land on no backend; and one Dynamo-only trace of
the model, so that no backend pays its first trace alone."""

from __future__ import annotations

import contextlib
import copy
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

from pipec_ir import CompileOptions

# pipec's compile cache, its kernel sources and tuning results, Inductor's and Triton's caches
CACHE_ENV = ("PIPEC_CACHE_DIR", "PIPEC_KERNEL_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")
# the root of the private caches in use (set by private_caches): a nested private_caches keeps them,
# so compile workers started under the outer one and compiles made under the inner one share them
PRIVATE_ROOT_ENV = "PIPEC_BENCH_PRIVATE_CACHES"


@contextlib.contextmanager
def private_caches() -> Iterator[str]:
    """pipec's, Inductor's and Triton's caches in a new empty directory, for the duration; inside
    private caches already in place, those."""
    if os.environ.get(PRIVATE_ROOT_ENV):
        yield os.environ[PRIVATE_ROOT_ENV]
        return
    saved = {k: os.environ.get(k) for k in (*CACHE_ENV, PRIVATE_ROOT_ENV)}
    with tempfile.TemporaryDirectory(prefix="pipec-bench-") as root:
        for k in CACHE_ENV:
            os.environ[k] = os.path.join(root, k.lower())
        os.environ[PRIVATE_ROOT_ENV] = root
        try:
            yield root
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@contextlib.contextmanager
def process_caches(keep_caches: bool, inductor: bool) -> Iterator[None]:
    """What `pipec bench` enters before it loads the model file: its private caches (unless
    `keep_caches`) and, when Inductor is measured, Inductor's compile workers started in the
    background, so they import torch while the model is built. Started inside the private caches,
    the workers compile into them, and Inductor's compiles stay cold. (Session 45's lease: the
    warm-up waited 4.8 s a case for workers started only by its tiny compile.)"""
    with contextlib.nullcontext() if keep_caches else private_caches():
        if inductor:
            start_inductor_workers()
        yield


def start_inductor_workers() -> None:
    """Have Inductor start its compile workers now, in the background (torch's
    `AsyncCompile.use_process_pool`: the pool and a first job that says when they answer). The
    import of Inductor's compile module (about 2 s on the CPU machine) is paid here, where the
    warm-up paid it before. Best effort, like the wait for them: a torch without the call starts
    them at its first compile."""
    try:
        from torch._inductor.async_compile import AsyncCompile

        start = getattr(AsyncCompile, "use_process_pool", None)
        if start is not None:
            start()
    except Exception:  # noqa: BLE001 - a head start for the workers, never a reason to fail
        pass


def warm_up_process(device: str, pipec_options: CompileOptions, inductor: bool,
                    progress: Callable[[str], None] = lambda message: None) -> None:
    """Compile a tiny function with every backend, so one-time process costs hit no measurement;
    each backend's warm-up, and the wait for Inductor's workers, is a phase of its own (`progress`).

    Best effort: a backend that cannot compile it fails, with its real error, on the model itself.
    """
    import torch

    from .api import compile_with_session

    def tiny(x):
        return torch.sigmoid(x) * x

    x = torch.randn(64, device=device)
    warm_ups = [("pipec", lambda: compile_with_session(tiny, replace(pipec_options, cache="none"))[0](x))]
    if inductor:
        # Inductor's first: its compile workers start in the background while pipec warms up, and
        # the wait below is then shorter (session 44's lease: 15.2 s of a case's ~86 s was warm-up)
        warm_ups.insert(0, ("Inductor", lambda: torch.compile(tiny)(x)))
    for backend, warm_up in warm_ups:
        progress(f"warming up the process: {backend}'s tiny compile")
        torch._dynamo.reset()
        with torch.no_grad(), contextlib.suppress(Exception):
            warm_up()
    torch._dynamo.reset()
    if inductor:
        progress("warming up the process: waiting for Inductor's compile workers")
        wait_for_inductor_workers()


def wait_for_inductor_workers(timeout: float = 120.0) -> None:
    """Wait until Inductor's compile workers are up. Its first compile starts them in the
    background (one process per core, each importing torch) and compiles in-process until they
    answer, so they would still be starting while the next compile runs; with the wait, Inductor's
    timed compiles use its workers, as in a process that has compiled before. (Session 43 suspected
    the starting workers of slowing pipec's default compile, the one right after, in AOTAutograd;
    session 44's lease still showed that gap with the wait: docs/performance.md.) Best effort: a
    torch without the call, or a pool that cannot start, leaves Inductor compiling as it would."""
    try:
        from torch._inductor.async_compile import AsyncCompile

        wait = getattr(AsyncCompile, "wait_pool_ready", None)
        if wait is not None:
            wait(timeout=timeout)
    except Exception:  # noqa: BLE001 - the wait is a courtesy to the timings, never a reason to fail
        pass


def trace_model_once(model, inputs) -> float | None:
    """Seconds of one Dynamo trace of a copy of `model` with no backend behind it (the graph runs
    as traced), then Dynamo's caches emptied: what is left warm is what every backend's first
    compile of this model would otherwise pay alone (pipec.bench's docstring, "compile cold"). None
    when Dynamo fails on the model: each backend then meets, and reports, that failure itself."""
    import torch

    torch._dynamo.reset()
    start = time.perf_counter()
    try:
        with torch.no_grad():
            torch.compile(fresh_copy(model), backend="eager")(*inputs)
        return time.perf_counter() - start
    except Exception:
        return None
    finally:
        torch._dynamo.reset()


def fresh_copy(model):
    """A new model object with the same weights (a function is its own fresh copy). Copies are
    made before anything is compiled: compiling may leave attributes on a module that cannot
    be copied (torch.compile's wrapper forwards setattr to the module it wraps)."""
    import torch

    return copy.deepcopy(model) if isinstance(model, torch.nn.Module) else model

"""Compiling Triton kernels in worker processes, as Inductor's compile workers do.

Triton's compiler holds the GIL in parts (its Python front end, MLIR passes driven from
Python), so the thread pool of `autotune.compile_all` scales poorly past a few threads. Here
the compiles run in separate processes that fill Triton's on-disk cache; the parent's own
`fn.warmup(...)` afterwards (the thread pool, unchanged) is then a cache hit.

* What a worker gets (`capture_requests`): the parent runs `fn.warmup(...)` for each job
  with Triton's `jit_cache_hook` installed, which hands over exactly what `JITFunction.run`
  would pass to `triton.compile` (signature with Triton's own integer specialization,
  constexprs, attributes, options) and skips the compile. Those, the kernel's source file
  and name, the GPU target of the parent's device, the Triton cache directory and the
  cache-invalidating environment go to a worker (`compile_worker`), which compiles
  `ASTSource(fn, signature, constexprs, attrs)` under the same cache key. No tensors, no
  CUDA in the workers.
* The workers are `python -c ...` processes started like Inductor's SubprocPool, not
  `multiprocessing` children: a spawned child re-runs the user's main script, and a fork
  would copy the parent's CUDA context. They start at the first load of a program on CUDA
  (`warm`), live as long as the process and are stopped at exit.
* Best effort: a worker that fails to compile a job leaves it to the parent (which reports
  the real error as it does today); a worker that dies or cannot start stops the pool for
  the rest of the process with one warning, and the thread pool compiles as before.
  Nothing a worker does can change a result: the parent's launch compiles whatever is not
  in the cache under its own key.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import hashlib
import json
import logging
import os
import pickle
import queue
import subprocess
import sys
import threading
import warnings

from . import compile_worker

log = logging.getLogger("pipec.runtime")

# with fewer cores than this the pool does not pay: the parent compiles in its thread pool
MIN_CORES = 3
MAX_WORKERS = 32


def available_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def pool_size(requested: int | None) -> int:
    """Worker processes for `requested` (the LoadContext's `compile_workers`): None is one per
    core this process may run on, up to MAX_WORKERS, and 0 where it has fewer than MIN_CORES;
    0 turns the pool off."""
    if requested is not None:
        return max(0, int(requested))
    cores = available_cores()
    return 0 if cores < MIN_CORES else min(cores, MAX_WORKERS)


class WorkerDied(RuntimeError):
    """A compile worker exited or its pipe broke."""


class CompilePool:
    """`size` worker processes sharing one queue of requests; one dispatching thread per worker
    sends it a request and waits for its answer."""

    def __init__(self, size: int):
        self.pid = os.getpid()
        self.size = size
        self.broken: str | None = None  # why the pool stopped, once it did
        self._queue: queue.Queue = queue.Queue()
        self._procs: list[subprocess.Popen] = []
        self._ids = iter(range(1 << 62))
        try:
            for _ in range(size):
                self._procs.append(subprocess.Popen(
                    [sys.executable, "-c", compile_worker.BOOT, *sys.path], stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, close_fds=True))
        except BaseException:
            self.close(kill=True)
            raise
        for proc in self._procs:
            threading.Thread(target=self._dispatch, args=(proc,), daemon=True,
                             name=f"pipec-compile-worker-{proc.pid}").start()

    def submit(self, payload: bytes) -> concurrent.futures.Future:
        """A future of (error message or None, worker seconds, cache key) for one pickled request."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        if self.broken is not None:
            future.set_exception(WorkerDied(self.broken))
        else:
            self._queue.put((next(self._ids), payload, future))
        return future

    def _dispatch(self, proc: subprocess.Popen) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            job_id, payload, future = item
            if self.broken is not None:
                future.set_exception(WorkerDied(self.broken))
                continue
            try:
                compile_worker.send(proc.stdin, (job_id, payload))
                answer = compile_worker.recv(proc.stdout)
                if answer is None or answer[0] != job_id:
                    raise WorkerDied(f"a compile worker exited (code {proc.poll()})")
                future.set_result(answer[1:])
            except Exception as e:  # noqa: BLE001 - a broken pipe, a worker that exited
                self.broken = self.broken or f"{type(e).__name__}: {e}"
                future.set_exception(WorkerDied(self.broken))
                self._fail_queued()
                return

    def _fail_queued(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not None:
                item[2].set_exception(WorkerDied(self.broken))

    def close(self, kill: bool = False) -> None:
        """Stop the workers: they exit when their stdin closes (at once with `kill`: a broken
        pool's compiles are no longer wanted)."""
        self.broken = self.broken or "the pool was closed"
        for _ in self._procs:
            self._queue.put(None)
        for proc in self._procs:
            try:
                if kill:
                    proc.kill()
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:  # noqa: BLE001 - at exit: a worker that hangs is killed
                proc.kill()
                proc.wait()
            proc.stdout.close()  # its dispatcher has read to the end: the worker is gone


_lock = threading.Lock()
_capture_lock = threading.Lock()
_pool: CompilePool | None = None
_disabled: str | None = None  # why the pool is off for the rest of the process


def get_pool(size: int) -> CompilePool | None:
    """The process's pool (started on the first call with size > 0), or None: pool off, or
    broken earlier. A forked child starts none: the pool's threads are the parent's."""
    global _pool, _disabled
    if size <= 0 or _disabled is not None:
        return None
    with _lock:
        if _pool is not None and _pool.pid == os.getpid():
            return _pool if _pool.broken is None else None
        if _pool is not None:  # forked: not ours
            return None
        try:
            _pool = CompilePool(size)
            atexit.register(shutdown)
            return _pool
        except Exception as e:  # noqa: BLE001 - no processes: the thread pool compiles
            why = f"could not start compile workers: {type(e).__name__}: {e}"
    disable(why)
    return None


def warm(size: int) -> None:
    """Start the pool now (a program is being loaded on CUDA), so its workers have imported
    Triton by the time the first call compiles."""
    if size > 0 and _pool is None and _disabled is None:
        get_pool(size)


def disable(why: str) -> None:
    """Turn the pool off for the rest of the process, with one warning."""
    global _disabled
    with _lock:
        if _disabled is not None:
            return
        _disabled = why
    warnings.warn(f"pipec: compiling Triton kernels in this process from now on ({why})", RuntimeWarning,
                  stacklevel=3)
    shutdown(kill=True)


def shutdown(kill: bool = False) -> None:
    """Stop the process's pool (at exit; `disable`)."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None and pool.pid == os.getpid():
        pool.close(kill)


def capture_requests(jobs: list[tuple]) -> tuple[list[tuple[dict, bytes, tuple | None]], list[tuple], list[tuple]]:
    """Split `jobs` (fn, args, sizes, grid, kwargs) into what workers can compile and what not.

    Runs each job's `fn.warmup` with a `jit_cache_hook` that records what `triton.compile`
    would get and skips the compile (module docstring). -> (requests, each as (request, the
    request pickled, where the parent will look for its kernel in Triton's cache
    (`cache_entry`) or None where it cannot tell); the jobs those requests compile; the other
    jobs: compiled already, in memory or on disk, or not a kernel a worker can compile)."""
    with _capture_lock:  # one capture at a time: each restores the hook it found
        return _capture(jobs)


def _capture(jobs: list[tuple]):
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars
    from triton.compiler import make_backend
    from triton.runtime import driver
    from triton.runtime.cache import triton_key

    knobs = triton.knobs.runtime
    previous = knobs.jit_cache_hook
    me = threading.get_ident()
    captured: list = []
    active = [True]

    def hook(*, key, repr, fn, compile, is_manual_warmup, already_compiled=False, **rest):  # noqa: A002
        # only this capture's warmups are skipped: another thread's compile, or any compile once
        # the capture is over (should someone keep this hook installed), goes ahead
        if not active[0] or threading.get_ident() != me:
            return previous(key=key, repr=repr, fn=fn, compile=compile, is_manual_warmup=is_manual_warmup,
                            already_compiled=already_compiled, **rest) if previous else None
        captured.append(compile)
        return True

    base = {"target": None, "cache_dir": triton.knobs.cache.dir, "env": dict(get_cache_invalidating_env_vars()),
            "triton_key": triton_key(), "triton": (triton.__version__, os.path.abspath(triton.__file__))}
    backend = None
    requests, sent, left, seen = [], [], [], set()
    knobs.jit_cache_hook = hook
    try:
        for job in jobs:
            fn, args, sizes, grid, kwargs = job
            where = _source_of(fn)
            captured.clear()
            if where is not None:
                try:
                    fn.warmup(*args, *sizes, grid=grid, **kwargs)
                except Exception:  # noqa: BLE001, S110 - the parent's own compile reports it
                    pass
            request = _request(captured[0], where, base, is_gluon(fn)) if captured else None
            if request is None:
                left.append(job)
                continue
            key = (where, str(captured[0].get("key")))
            if key in seen:  # another job's compile
                sent.append(job)
                continue
            if base["target"] is None:
                target = driver.active.get_current_target()
                base["target"] = (target.backend, target.arch, target.warp_size)
                base["ptxas"] = compile_worker.parents_ptxas(target.arch) if target.backend == "cuda" else None
                backend = make_backend(target)
            request["target"], request["ptxas"] = base["target"], base["ptxas"]
            entry = cache_entry(fn, request, backend)
            if entry is not None and in_cache(entry):
                left.append(job)  # a cache hit for the parent
                continue
            try:
                payload = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:  # noqa: BLE001 - a constexpr that does not pickle: compiled here
                left.append(job)
                continue
            seen.add(key)
            requests.append((request, payload, entry))
            sent.append(job)
    finally:
        active[0] = False
        knobs.jit_cache_hook = previous
    return requests, sent, left


def _source_of(fn) -> tuple[str, str, str] | None:
    """(source file, module name, function name) of a module-level `@triton.jit` or Gluon
    `@gluon.jit` function a worker can import; None for anything else (an interpreted one)."""
    from triton.runtime.jit import JITFunction

    if type(fn) is not JITFunction and not is_gluon(fn):
        return None
    py = getattr(fn, "fn", None)
    code = getattr(py, "__code__", None)
    if code is None or py.__qualname__ != py.__name__ or not os.path.isfile(code.co_filename):
        return None
    return code.co_filename, py.__module__, py.__name__


def is_gluon(fn) -> bool:
    """A Gluon kernel (its own front end: `GluonASTSource`). Gluon kernels are the slowest to
    compile (warp-specialized GEMMs), so they go to the workers too."""
    from triton.runtime.jit import JITFunction

    return isinstance(fn, JITFunction) and bool(getattr(fn, "is_gluon", lambda: False)())


def _request(compile: dict, where: tuple[str, str, str], base: dict, gluon: bool) -> dict | None:
    try:
        options = json.loads(compile["specialization_data"])["options"]
    except (KeyError, TypeError, ValueError):
        return None
    # as `JITFunction.preload` reads them back: JSON made the options' tuples lists
    options = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    path, module, name = where
    return {**base, "path": path, "module": module, "name": name, "signature": dict(compile["signature"]),
            "constants": dict(compile.get("constants") or {}), "attrs": dict(compile["configs"][0]),
            "options": options, "gluon": gluon}


def cache_entry(fn, request: dict, backend) -> tuple[str, str, str] | None:
    """(Triton's cache key, metadata file name, the key before hashing) of the kernel the
    parent's `triton.compile` of `request` will look up, computed as it does (`backend`:
    Triton's for the request's target); None where a hook of Triton's changes it."""
    import triton

    if getattr(triton.knobs.runtime, "add_stages_inspection_hook", None) is not None:
        return None
    try:
        source = compile_worker.ast_source_class(request.get("gluon", False))
        src = source(fn, request["signature"], request["constants"], request["attrs"])
        key = compile_worker.cache_key_text(src, backend, request["options"], request["env"])
        return hashlib.sha256(key.encode("utf-8")).hexdigest(), f"{src.name[:150]}.json", key
    except Exception:  # noqa: BLE001 - a Triton that computes it otherwise: not checked
        return None


def where_keys_differ(ours: str, theirs: str | None, context: int = 60) -> str:
    """Where two of Triton's cache keys part ways, for a message: the parent's and a worker's
    text around the first differing character."""
    if theirs is None:
        return "the worker sent no key"
    at = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
    start = max(0, at - context)
    return f"at character {at}: here ...{ours[start:at + context]!r}, in the worker ...{theirs[start:at + context]!r}"


def in_cache(entry: tuple[str, str]) -> bool:
    from triton.runtime.cache import get_cache_manager

    return get_cache_manager(entry[0]).get_group(entry[1]) is not None


def job_key(job: tuple) -> tuple:
    """What one compile job (fn, args, sizes, grid, kwargs) is compiled for: the function, its
    constexprs and launch options, each tensor's dtype and 16-byte alignment (what Triton
    specializes a pointer on), every other argument's value. Jobs with one key are one
    compile: the same kernel body at the same sizes in twelve layers is captured and
    compiled once."""
    fn, args, sizes, _grid, kwargs = job
    described = tuple((str(a.dtype), a.data_ptr() % 16 == 0) if hasattr(a, "data_ptr") else (type(a).__name__, a)
                      for a in args)
    return (id(fn), tuple(sorted(kwargs.items())), described, tuple(sizes))


def unique_jobs(jobs: list[tuple]) -> list[tuple]:
    """`jobs` without repeats of a `job_key` (the first of each kept, in order)."""
    seen, out = set(), []
    for job in jobs:
        key = job_key(job)
        if key not in seen:
            seen.add(key)
            out.append(job)
    return out


class Batch:
    """Compiles sent to the workers (`start_in_workers`): `sent`, the jobs they compile; `left`,
    the jobs the parent compiles (or loads) itself, meanwhile; `keys`, the `job_key` of both
    (a later compile of the same jobs need not capture them again)."""

    def __init__(self, requests: list, futures: list, sent: list[tuple], left: list[tuple]):
        self.requests, self.futures, self.sent, self.left = requests, futures, sent, left
        self.keys = frozenset(job_key(job) for job in (*sent, *left))

    def wait(self, profile=None) -> int:
        """Wait for the workers; -> how many kernels they put in the cache. A kernel a worker
        compiled under another key than this process computes is compiled here (one log line
        says where the keys differ); a worker that died, or no compile of the batch under this
        process's keys, turns the pool off."""
        compiled = failed = astray = 0
        first_astray = None
        for (request, _, entry), future in zip(self.requests, self.futures):
            try:
                error, _seconds, key = future.result()
            except WorkerDied as e:
                disable(f"a compile worker failed: {e}")
                break
            if error is not None:  # the parent compiles it, and reports the real error
                log.debug("compile worker: %s: %s", request["name"], error)
                failed += 1
            elif entry is not None and not in_cache(entry):
                astray += 1
                first_astray = first_astray or (request["name"], where_keys_differ(entry[2], key))
            else:
                compiled += 1
        if first_astray is not None:
            name, where = first_astray
            log.warning("compile workers: %d of %d kernels were compiled under another cache key than this "
                        "process computes and are compiled here; the first, %s, differs %s",
                        astray, len(self.requests), name, where)
            if compiled == 0 and astray > 1:
                disable(f"kernel {name} and {astray - 1} more compiled in workers are not under the cache keys "
                        "this process computes")
        if profile is not None:
            profile.count("triton_compiles_in_workers", compiled)
            profile.count("triton_compile_worker_errors", failed + astray)
        return compiled


def compiled_already(job: tuple) -> bool:
    """Is `job`'s kernel in Triton's cache, in memory or on disk? (A few milliseconds: one
    capture.) False where that cannot be told."""
    if _source_of(job[0]) is None:
        return False
    try:
        requests, _, left = capture_requests([job])
    except Exception:  # noqa: BLE001 - no driver, a Triton whose hooks differ
        return False
    return not requests and bool(left)


def start_in_workers(jobs: list[tuple], size: int) -> Batch | None:
    """Send `jobs`' compiles to the worker pool (each distinct job once: `unique_jobs`); None (the
    parent compiles everything) without a pool (size 0, turned off), without an active Triton
    GPU driver, or for a lone job (one compile is no faster in a worker). A batch with no
    requests: everything is in Triton's cache already."""
    if size <= 0 or _disabled is not None:
        return None
    jobs = unique_jobs(jobs)
    if len(jobs) < 2:
        return None
    try:
        requests, sent, left = capture_requests(jobs)
    except Exception as e:  # noqa: BLE001 - no driver, a Triton whose hooks differ: compile here
        log.debug("compile workers: could not capture the compiles: %s: %s", type(e).__name__, e)
        return None
    pool = get_pool(size) if requests else None
    if requests and pool is None:
        return None
    requests = longest_first(requests)
    return Batch(requests, [pool.submit(payload) for _, payload, _ in requests], sent, left)


def compile_cost(request: dict) -> tuple:
    """How long a request's compile is expected to take, as a sort key: Gluon's warp-specialized
    GEMMs first, then kernels by software-pipelining stages (a GEMM template's 3-5 against a
    pointwise kernel's 1) and warps."""
    options = request.get("options") or {}
    return (bool(request.get("gluon")), int(options.get("num_stages") or 1), int(options.get("num_warps") or 4))


def longest_first(requests: list) -> list:
    """`requests` in the order the workers take them: the longest compiles first. The workers
    take a shared queue in order, so a GEMM queued behind a batch of pointwise kernels started
    only when a worker came free, and the batch waited on it (a greedy schedule is within 4/3
    of the best one when the longest jobs go first). Stable among equals: graph order."""
    return sorted(requests, key=lambda r: compile_cost(r[0]), reverse=True)


def compile_in_workers(jobs: list[tuple], size: int, profile=None) -> int:
    """Compile `jobs` in the worker pool and wait: how many kernels the workers put in Triton's
    cache (0 where `start_in_workers` sends nothing)."""
    batch = start_in_workers(jobs, size)
    return 0 if batch is None else batch.wait(profile)


__all__ = ["Batch", "CompilePool", "cache_entry", "capture_requests", "compile_cost", "compile_in_workers",
           "compiled_already", "is_gluon", "job_key", "longest_first", "pool_size", "shutdown", "start_in_workers",
           "unique_jobs", "warm"]

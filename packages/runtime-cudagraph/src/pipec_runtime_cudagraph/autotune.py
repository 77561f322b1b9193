"""Autotuning a launch: compiling its candidate configs at once, timing them, and remembering
the fastest per kernel body and size bucket.

A launch (`steps.LaunchStep`) times its configs on its first run in each size bucket
(`time_configs`). What was picked is kept in the model's `TuningMemo` (owned by the
`LoadContext` the model was loaded with: identical kernels, a model's repeated layers or
another graph of the same model, are timed once) and in the tuning cache on disk
(`tuning_cache.py`), which is what a second model or a second process finds.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from collections import OrderedDict

import torch

from pipec_ir import CompileProfile

from .compile_pool import Batch, compiled_already, job_key, start_in_workers, unique_jobs
from .kernels import body_digest
from .rounds import time_in_rounds
from .tma import misaligned, uses_tma
from .tuning_cache import tuning_key
from .tuning_table import describe_config, gpu_family, launch_features, table_for

# What autotuning picked, at INFO: one line per kernel and size bucket it times (choices.py adds
# one per GEMM choice group). `logging.getLogger("pipec.tuning").setLevel(logging.INFO)` with a
# handler shows it.
tuning_log = logging.getLogger("pipec.tuning")


class TuningMemo:
    """What autotuning picked for one loaded model, in memory: per (kernel body digest, size
    bucket, device) the index of the fastest config (`configs`), and per (choice digest, size
    bucket, device, timer) the alternative a choice group picked with the timings it was picked
    on (`choices`, choices.py).

    One per `LoadContext` (`LoadContext.memo(MEMO_KEY, TuningMemo)`): every program loaded
    with the context shares it. Each table keeps its MAX_ENTRIES most recently stored entries;
    one dropped is timed again, or read back from the tuning cache on disk."""

    MAX_ENTRIES = 4096

    def __init__(self) -> None:
        self.configs: OrderedDict[tuple, int] = OrderedDict()
        self.choices: OrderedDict[tuple, tuple[str, dict[str, float]]] = OrderedDict()
        # keys of `configs` the shipped tuning table answered (not timed here): checked to build
        # and load before they are trusted (LaunchStep.autotune)
        self.from_table: set[tuple] = set()

    def put(self, table: OrderedDict, key: tuple, value) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self.MAX_ENTRIES:
            table.popitem(last=False)


# the name a runtime of this package keeps its TuningMemo under in a LoadContext
MEMO_KEY = "pipec_runtime_cudagraph.tuning"


def time_configs(launch, vals, symvals, bucket: tuple, shared_key: tuple, disk_key: str | None) -> int:
    """Index of the fastest config at `symvals`, timed now (`LaunchStep.autotune`), stored in the
    model's `TuningMemo` and in the tuning cache."""
    from triton.testing import do_bench

    runner = launch.runner
    # outputs go to scratch tensors while timing: an in-place launch (output in its
    # input's slot) run again would read what it wrote the time before
    args = [vals[i] for i in launch.ptrs]
    for j in range(launch.n_inputs, len(args)):
        args[j] = torch.empty_like(args[j])
    # autotune_configs=N: time only the first N candidates (fast compiles; 1 = none)
    candidates = launch.kernel.configs[:runner.autotune_configs]
    if launch.tma and misaligned(args, launch.maybe_unaligned):  # TMA needs aligned pointers
        candidates = [c for c in candidates if not uses_tma(c)]
    compile_all(launch.compile_jobs(candidates, args, symvals), runner.profile, runner.compile_workers)
    calls, timed_configs = {}, launch.kernel.configs[:runner.autotune_configs]
    for j, config in enumerate(timed_configs):
        if config in candidates:
            launch.set_config(config)
            sizes, grid = launch.dims if launch.static else launch.dims(*symvals)
            calls[j] = lambda g=grid, a=args, s=sizes, k=launch.kwargs: launch.fn[g](*a, *s, **k)
    runner.profile.count("kernels_timed")
    runner.profile.count("configs_tried", len(calls))
    # each config's time is its mean over rounds of alternating order (rounds.py: clock drift)
    timed, errors = time_in_rounds(calls, lambda call: do_bench(call, warmup=1, rep=5), prune=runner.prune_timing)
    times = [timed.get(j, math.inf) for j in range(len(timed_configs))]
    for j, e in errors.items():
        tuning_log.info("%s: config %s failed: %s: %s", launch.kernel.name,
                        describe_config(launch.kernel.configs[j]), type(e).__name__,
                        str(e).splitlines()[0][:200] if str(e) else "")
    if all(t == math.inf for t in times):
        raise next(iter(errors.values()), RuntimeError(f"no config of {launch.kernel.name} could be timed"))
    chosen = min(range(len(times)), key=times.__getitem__)
    runner.memo.put(runner.memo.configs, shared_key, chosen)
    runner.memo.from_table.discard(shared_key)  # timed here: no longer the table's pick
    tuning_log.info("%s%s: config %d of %d (%s), %.4f ms; all: %s", launch.kernel.name,
                    f" bucket {bucket}" if bucket else "", chosen, len(times),
                    describe_config(launch.kernel.configs[chosen]), times[chosen],
                    " ".join(f"{t:.4f}" for t in times))
    if disk_key is not None and len(times) > 1:
        learn = {"family": gpu_family(vals[launch.ptrs[0]].device) if launch.ptrs else None,
                 "features": launch_features(launch, symvals), "labels": [describe_config(c) for c in timed_configs]}
        runner.tuning_cache.put(disk_key, chosen, times, learn)
    return chosen


def known_config(launch, bucket: tuple, device: torch.device, symvals: tuple | None = None) -> int | None:
    """The config already chosen for this kernel and size bucket: by this runner, for the
    same kernel body in this model (another layer or graph: the runner's `TuningMemo`), or
    by an earlier model or process (the tuning cache); else, given the call's `symvals`, the
    shipped tuning table's pick for a kernel like it (tuning_table.py); None when it still
    has to be timed."""
    chosen = launch.runner.tuned.get((launch.kernel.name, bucket))
    if chosen is not None:
        return chosen
    shared_key, disk_key = tuning_keys(launch, bucket, device)
    chosen = launch.runner.memo.configs.get(shared_key)
    if chosen is None and disk_key is not None:
        chosen = launch.runner.tuning_cache.get(disk_key, len(launch.kernel.configs))
    if chosen is None and symvals is not None:
        chosen = table_config(launch, symvals, device)
        if chosen is not None:
            launch.runner.memo.from_table.add(shared_key)
    if chosen is not None:
        launch.runner.memo.put(launch.runner.memo.configs, shared_key, chosen)
    return chosen


def table_config(launch, symvals: tuple, device: torch.device) -> int | None:
    """The index of the tuning table's pick for this launch at `symvals`, if it is one of the
    configs this runner would time (`autotune_configs` may have cut the list)."""
    table = table_for(launch.runner, device)
    if not table:
        return None
    pick = table.pick(launch_features(launch, symvals))
    if pick is None:
        return None
    timed = [describe_config(c) for c in launch.kernel.configs[:launch.runner.autotune_configs]]
    if pick not in timed:
        return None
    launch.runner.profile.count("configs_from_table")
    tuning_log.info("%s: config %d (%s) from the tuning table", launch.kernel.name, timed.index(pick), pick)
    return timed.index(pick)


def forget_table_pick(launch, shared_key: tuple, why: str) -> None:
    """The table's pick for this kernel body does not build or load here (another body than the
    one it was learned on may need more registers or shared memory): time the candidates instead."""
    memo = launch.runner.memo
    memo.from_table.discard(shared_key)
    memo.configs.pop(shared_key, None)
    tuning_log.warning("%s: the tuning table's config does not run here (%s); timing the candidates",
                       launch.kernel.name, why)


def tuning_keys(launch, bucket: tuple, device: torch.device) -> tuple[tuple, str | None]:
    """(the `TuningMemo` key of the kernel body's choice, the tuning cache's key or None when
    there is no tuning cache)."""
    digest = body_digest(launch.kernel)
    disk_key = (tuning_key(digest, bucket, device_name(device), triton_version())
                if launch.runner.tuning_cache is not None else None)
    return (digest, bucket, str(device)), disk_key


def compile_all(jobs: list[tuple], profile: CompileProfile | None = None, workers: int = 0,
                started: Batch | None = None) -> None:
    """Compile `jobs` (fn, args, sizes, grid, kwargs: `LaunchStep.compile_jobs`) at once. With
    `workers` > 0 the compiles first run in that many worker processes (compile_pool.py), which
    fill Triton's on-disk cache; then Triton's AsyncCompileMode runs each job's warmup in a
    thread pool (ptxas is a subprocess, LLVM releases the GIL in parts): a cache hit for what the
    workers compiled, the compile itself for anything they did not (docs/performance.md,
    "Triton compiles run in worker processes"). A lone job is compiled here too, so that its
    compile is Triton compilation in `profile` rather than part of the launch that would compile
    it. `started`: compiles sent to the workers earlier (the program's load), waited for first.
    Best effort: a config that fails to compile fails again, and loses, when it is timed."""
    profile = profile if profile is not None else CompileProfile()
    if started is not None:
        with profile.part("triton_compile"):
            started.wait(profile)
    jobs = unique_jobs(jobs)  # twelve layers of one kernel at one size: one compile
    if not jobs:
        return
    for fn, args, sizes, _grid, kwargs in jobs:  # a config built before is a lookup in Triton's cache
        profile.distinct("triton_compiles", compile_key(fn, args, sizes, kwargs))
    with profile.part("triton_compile"):
        known = started.keys if started is not None else frozenset()
        done = [job for job in jobs if job_key(job) in known]  # captured and compiled at load: cache hits
        fresh = [job for job in jobs if job_key(job) not in known]
        # a warm cache (three jobs spread over the list are compiled already): loading them here
        # is cheaper than capturing every job to find the few a worker could build
        warm = workers > 0 and len(fresh) > 3 and all(compiled_already(fresh[i]) for i in (0, len(fresh) // 2, -1))
        batch = None if warm else start_in_workers(fresh, workers)
        if batch is None:
            _compile_jobs(fresh + done)
        else:
            _compile_jobs(done + batch.left)  # what the workers do not compile (in the cache already), meanwhile
            batch.wait(profile)
            _compile_jobs(batch.sent)  # cache hits; compiles what a worker could not
        _load_compiled(jobs)


def _compile_jobs(jobs: list[tuple]) -> None:
    import triton

    if not jobs:
        return
    if len(jobs) == 1:
        fn, args, sizes, grid, kwargs = jobs[0]
        with contextlib.suppress(Exception):  # see compile_all
            fn.warmup(*args, *sizes, grid=grid, **kwargs)
        return
    async_mode = getattr(triton, "AsyncCompileMode", None)  # triton >= 3.4
    if async_mode is None:
        return
    from concurrent.futures import ThreadPoolExecutor

    mode = None
    try:
        with ThreadPoolExecutor(max_workers=min(len(jobs), COMPILE_THREADS)) as pool:
            mode = async_mode(pool)
            with mode:
                for fn, args, sizes, grid, kwargs in jobs:
                    fn.warmup(*args, *sizes, grid=grid, **kwargs)
    except Exception:  # noqa: BLE001, S110 - see compile_all
        pass
    finally:
        leave_async_mode(mode)


def _load_compiled(jobs: list[tuple]) -> None:
    """Load the compiled kernels of `jobs` on their GPU at once, in threads. Loading a kernel
    builds Triton's launcher for its signature (a C compile in a subprocess on Triton 3.6, cached
    on disk) and loads its module; the first launch of each kernel would otherwise do that one
    after another (BERT base, cold: ~2 s of the first call). Best effort: a kernel that fails to
    load here fails again, with its error, where it is launched or timed."""
    kernels = {}
    for fn, args, sizes, grid, kwargs in jobs:
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        if device is None or device.type != "cuda":
            continue
        try:
            kernel = fn.warmup(*args, *sizes, grid=grid, **kwargs)  # compiled above: Triton's in-memory cache
        except Exception:  # noqa: BLE001, S112 - see the docstring
            continue
        if getattr(kernel, "_init_handles", None) is not None and getattr(kernel, "module", True) is None:
            kernels.setdefault(id(kernel), (kernel, device))
    if len(kernels) < 2:
        return
    from concurrent.futures import ThreadPoolExecutor

    def load(item) -> None:
        kernel, device = item
        with contextlib.suppress(Exception):
            torch.cuda.set_device(device)  # a new thread's current device is 0
            kernel._init_handles()

    with ThreadPoolExecutor(max_workers=min(len(kernels), COMPILE_THREADS)) as pool:
        list(pool.map(load, kernels.values()))


def compile_key(fn, args, sizes, kwargs) -> tuple:
    """What Triton specializes one compile of `fn` on, roughly: the constexprs and launch options,
    the pointers' dtypes, and for each integer argument whether it is 1 or a multiple of 16."""
    dtypes = tuple(str(getattr(a, "dtype", type(a).__name__)) for a in args)
    ints = tuple((int(v) == 1, int(v) % 16 == 0) for v in sizes)
    return (id(fn), tuple(sorted(kwargs.items())), dtypes, ints)


def leave_async_mode(mode) -> None:
    """Make sure `mode` is no longer Triton's active compile mode. Before triton 3.7 its __exit__
    cleared the mode only after every compile had succeeded: one candidate config that failed to
    compile (float16 on a Hopper GPU, triton 3.6) left the mode active with its thread pool shut down,
    and every later Triton compile in the process failed with "cannot schedule new futures after
    shutdown"."""
    try:
        from triton.runtime import _async_compile
    except ImportError:
        return
    active = getattr(_async_compile, "active_mode", None)
    if mode is not None and active is not None and active.get() is mode:
        active.set(None)


# threads compiling one kernel's candidate configs (each mostly waits on ptxas or LLVM), or
# loading what the worker processes compiled from Triton's cache
COMPILE_THREADS = max(1, min(8, (os.cpu_count() or 2) - 1))


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def triton_version() -> str:
    import triton

    return triton.__version__


__all__ = ["MEMO_KEY", "TuningMemo", "compile_all", "describe_config", "device_name", "forget_table_pick", "known_config",
           "leave_async_mode",
           "time_configs", "triton_version", "tuning_keys", "tuning_log"]

"""Triton kernels compiled in worker processes (compile_pool.py, compile_worker.py).

Triton compiles for a CUDA target without a GPU (ptxas ships in its wheel), so the CPU
machine checks the whole path in a fresh process: Triton's driver is a stand-in that
reports an sm90 GPU, a program's first call compiles its candidate configs in the pool, and
the parent's own compile of each (`fn.warmup`, as the runtime runs it) must then be a hit in
Triton's cache, of the same kernel it compiles itself. Kernels cannot run here.
"""

import os
import subprocess
import sys
import textwrap

import pytest

from pipec_runtime_cudagraph import compile_pool

PRELUDE = '''
import os, sys, warnings
import torch, triton
from triton.backends.compiler import GPUTarget
from triton.runtime import driver


class Sm90Driver:
    """What `JITFunction.run` asks of Triton's driver, for an sm90 GPU that is not there."""

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return GPUTarget("cuda", 90, 32)


driver.set_active(Sm90Driver())
torch.cuda.is_available = lambda: True  # the runner builds its CUDA plan (kernels are not interpreted)

from pipec_ir import CompileOptions, CompileProfile, LaunchConfig, LoadContext
from runtime_helpers import add_program
from pipec_runtime_cudagraph import compile_pool
from pipec_runtime_cudagraph.launch import ProgramRunner

compiles = []  # (kernel, cache hit, Triton's cache key) of every compile in this process
triton.knobs.compilation.listener = (
    lambda *, src, metadata, metadata_group, times, cache_hit: compiles.append((src.name, cache_hit, metadata["hash"])))
CONFIGS = tuple(LaunchConfig(constants=(("BLOCK", b),), num_warps=w, num_stages=1) for b, w in ((64, 2), (256, 4)))


def first_call_compiles(kernel_dir, workers):
    """The runner's first-call compile of every candidate config; -> (runner, profile)."""
    profile = CompileProfile()
    context = LoadContext(profile=profile, kernel_dir=kernel_dir, tuning_cache=False, compile_workers=workers)
    runner = ProgramRunner(add_program(n=1000, configs=CONFIGS), CompileOptions(runtime="launch", autotune=True), context)
    runner._launches["cpu"] = runner._launches["cuda"]  # stand-in tensors on the CPU
    with profile.measure():
        runner._precompile([torch.randn(1000), torch.randn(1000)], (), torch.device("cpu"))
    return runner, profile
'''


def run_script(tmp_path, body: str) -> str:
    code = PRELUDE + textwrap.dedent(body)
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "triton"), TRITON_INTERPRET="0")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(__file__), env.get("PYTHONPATH", "")])
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300,
                            cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result.stdout


def torch_cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def compiles_for_cuda_here() -> bool:
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return os.path.isfile(get_ptxas(90).path)
    except Exception:  # noqa: BLE001 - no NVIDIA backend or no ptxas in this Triton
        return False


needs_ptxas = pytest.mark.skipif(not compiles_for_cuda_here(), reason="this Triton cannot compile for sm90 here")
# these fake an sm90 driver in a process without CUDA; with a real GPU, CPU tensors run on it
# (runner.run_cpu_on_cuda) and the counts they check are the real device's
no_real_gpu = pytest.mark.skipif(torch_cuda_available(), reason="fakes an sm90 GPU on a host without one")


@needs_ptxas
def test_workers_fill_tritons_cache_with_the_parents_kernels(tmp_path):
    """Every candidate config is compiled in a worker; the parent's compile of each is then a
    cache hit, under its own key, and is the kernel the parent compiles without the pool."""
    out = run_script(tmp_path, '''
        runner, profile = first_call_compiles("kernels", workers=2)
        counts = profile.to_dict()["counts"]
        assert counts["triton_compiles"] == 2 and counts["triton_compiles_in_workers"] == 2, counts
        assert [hit for _, hit, _ in compiles] == [True] * 2, compiles  # the parent compiled nothing itself
        assert profile.parts()["triton_compile"] > 0
        pooled = {key for _, _, key in compiles}

        # a new model with the same kernel finds it in Triton's cache: nothing goes to a worker
        again = ProgramRunner(add_program(n=1000, configs=CONFIGS), CompileOptions(runtime="launch", autotune=True),
                              LoadContext(kernel_dir="kernels-again", tuning_cache=False, compile_workers=2))
        launch = again._launches["cuda"][0]
        requests, sent, left = compile_pool.capture_requests(launch.compile_jobs(CONFIGS, [torch.empty(1000)] * 3, ()))
        assert (len(requests), len(sent), len(left)) == (0, 0, 2)
        assert triton.knobs.runtime.jit_cache_hook is None  # the capture's hook is gone

        # the same compiles without workers, into an empty cache: the same three kernels
        compile_pool.shutdown()
        compiles.clear()
        triton.knobs.cache.dir = os.path.abspath("triton-alone")
        fresh = ProgramRunner(add_program(n=1000, configs=CONFIGS), CompileOptions(runtime="launch", autotune=True),
                              LoadContext(kernel_dir="kernels2", tuning_cache=False, compile_workers=0))
        fresh._launches["cpu"] = fresh._launches["cuda"]
        fresh._precompile([torch.randn(1000), torch.randn(1000)], (), torch.device("cpu"))
        assert [hit for _, hit, _ in compiles] == [False] * 2, compiles
        assert {key for _, _, key in compiles} == pooled
        print("ok")
    ''')
    assert "ok" in out


GLUON_KERNEL = """
from triton.experimental import gluon
from triton.experimental.gluon import language as gl


@gluon.jit
def copy_kernel(x, y, n, BLOCK: gl.constexpr):
    layout: gl.constexpr = gl.BlockedLayout([1], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    gl.store(y + offs, gl.load(x + offs, mask=offs < n), mask=offs < n)
"""


@needs_ptxas
def test_gluon_kernels_compile_in_workers(tmp_path):
    """A Gluon kernel (its own front end, GluonASTSource) is compiled in a worker under the key
    the parent's own compile computes: the parent's compile is then a cache hit."""
    (tmp_path / "gluon_copy.py").write_text(GLUON_KERNEL)
    out = run_script(tmp_path, '''
        sys.path.insert(0, os.getcwd())
        import gluon_copy
        x = torch.empty(1000)
        jobs = [(gluon_copy.copy_kernel, [x, x], [1000], (8,), {"BLOCK": b, "num_warps": w})
                for b, w in ((128, 4), (256, 8))]
        batch = compile_pool.start_in_workers(jobs, 2)
        assert batch is not None and len(batch.requests) == 2 and all(r["gluon"] for r, _, _ in batch.requests)
        assert batch.wait() == 2
        assert compiles == [], compiles  # nothing compiled here yet
        for fn, args, sizes, grid, kwargs in jobs:
            fn.warmup(*args, *sizes, grid=grid, **kwargs)
        assert [hit for _, hit, _ in compiles] == [True, True], compiles
        print("ok")
    ''')
    assert "ok" in out


@needs_ptxas
@no_real_gpu
def test_compiles_start_at_load_and_the_first_call_waits_for_them(tmp_path):
    """A program whose sizes are all static sends its first call's compiles to the workers while
    it loads (`_start_compiles`); the first call waits for them and compiles nothing itself.
    With early_compile=False nothing is sent before the first call."""
    out = run_script(tmp_path, '''
        profile = CompileProfile()
        context = LoadContext(profile=profile, kernel_dir="kernels", tuning_cache=False, compile_workers=2)
        options = CompileOptions(runtime="launch", autotune=True)
        with profile.measure():
            runner = ProgramRunner(add_program(n=1000, configs=CONFIGS), options, context)
            assert runner._started_compiles is None  # no CUDA here to make stand-ins on: nothing sent
            runner._launches["cpu"] = runner._launches["cuda"]
            runner._start_compiles(torch.device("cpu"))  # what a load on a GPU does
            batch = runner._started_compiles
            assert batch is not None and len(batch.sent) == 2, batch
            assert compiles == [], compiles  # the parent has compiled nothing
            captures, capture = [], compile_pool.capture_requests
            compile_pool.capture_requests = lambda jobs: captures.append(len(jobs)) or capture(jobs)
            runner._precompile([torch.randn(1000), torch.randn(1000)], (), torch.device("cpu"))
            assert captures == [], captures  # the jobs captured at load are not captured again
        assert runner._started_compiles is None
        counts = profile.to_dict()["counts"]
        assert counts["triton_compiles_in_workers"] == 2 and counts["triton_compiles"] == 2, counts
        assert [hit for _, hit, _ in compiles] == [True] * 2, compiles

        # the same program again: its first kernel is in Triton's cache, so nothing is captured or sent
        again = ProgramRunner(add_program(n=1000, configs=CONFIGS), options,
                              LoadContext(kernel_dir="kernels-again", tuning_cache=False, compile_workers=2))
        again._launches["cpu"] = again._launches["cuda"]
        captures.clear()
        again._start_compiles(torch.device("cpu"))
        assert again._started_compiles is None and captures == [1], captures

        off = ProgramRunner(add_program(n=1000, configs=CONFIGS), options.with_extra(early_compile=False),
                            LoadContext(kernel_dir="kernels2", tuning_cache=False, compile_workers=2))
        off._launches["cpu"] = off._launches["cuda"]
        off._start_compiles(torch.device("cpu"))
        assert off._started_compiles is None
        print("ok")
    ''')
    assert "ok" in out


@needs_ptxas
@no_real_gpu
def test_a_warm_first_call_samples_the_cache_instead_of_capturing_every_job(tmp_path):
    """Once Triton's cache holds a program's kernels, a new first call of it checks three of its
    jobs (one capture each) and loads everything itself: no capture of every job, no worker."""
    out = run_script(tmp_path, '''
        five = tuple(LaunchConfig(constants=(("BLOCK", b),), num_warps=w, num_stages=1)
                     for b, w in ((64, 2), (128, 2), (256, 4), (512, 4), (1024, 8)))

        def first_call(kernel_dir):
            profile = CompileProfile()
            context = LoadContext(profile=profile, kernel_dir=kernel_dir, tuning_cache=False, compile_workers=2)
            runner = ProgramRunner(add_program(n=1000, configs=five), CompileOptions(runtime="launch", autotune=True),
                                   context)
            runner._launches["cpu"] = runner._launches["cuda"]
            with profile.measure():
                runner._precompile([torch.randn(1000), torch.randn(1000)], (), torch.device("cpu"))
            return profile.to_dict()["counts"]

        assert first_call("kernels")["triton_compiles_in_workers"] == 5
        captures, capture = [], compile_pool.capture_requests
        compile_pool.capture_requests = lambda jobs: captures.append(len(jobs)) or capture(jobs)
        compiles.clear()
        counts = first_call("kernels-again")
        assert captures == [1, 1, 1], captures
        assert not counts.get("triton_compiles_in_workers"), counts
        assert [hit for _, hit, _ in compiles] == [True] * 5, compiles
        print("ok")
    ''')
    assert "ok" in out


@needs_ptxas
def test_worker_failures_fall_back_to_compiling_in_the_parent(tmp_path):
    """A job a worker cannot compile is left to the parent, without a warning; workers that die
    turn the pool off for the process with one warning, and the parent compiles everything."""
    out = run_script(tmp_path, '''
        from pipec_runtime_cudagraph import compile_worker

        # a worker cannot import the kernel (its file is gone): each job comes back as an error
        profile = CompileProfile()
        context = LoadContext(profile=profile, kernel_dir="kernels", tuning_cache=False, compile_workers=2)
        runner = ProgramRunner(add_program(n=1000, configs=CONFIGS), CompileOptions(runtime="launch", autotune=True),
                               context)
        launch = runner._launches["cuda"][0]
        jobs = launch.compile_jobs(CONFIGS, [torch.empty(1000)] * 3, ())
        os.remove(launch.fn.fn.__code__.co_filename)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert compile_pool.compile_in_workers(jobs, 2) == 0
        assert not [w for w in caught if str(w.message).startswith("pipec")], [str(w.message) for w in caught]
        assert compile_pool.get_pool(2) is not None  # the pool is still there

        # workers that exit at once: one warning, the pool is off, the parent compiles it all
        compile_pool.shutdown()
        compile_worker.BOOT = "import sys; sys.exit(3)"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runner, profile = first_call_compiles("kernels2", workers=2)
            runner, _ = first_call_compiles("kernels3", workers=2)  # a second model: no pool, no warning
        messages = [str(w.message) for w in caught if str(w.message).startswith("pipec")]
        assert len(messages) == 1 and "compile worker" in messages[0], messages
        assert compile_pool.get_pool(2) is None
        assert profile.to_dict()["counts"].get("triton_compiles_in_workers", 0) == 0
        assert [hit for _, hit, _ in compiles][:2] == [False] * 2, compiles  # compiled here
        print("ok")
    ''')
    assert "ok" in out


ASTRAY_BOOT = """import sys; sys.path[:0] = sys.argv[1:]
import pipec_runtime_cudagraph.compile_worker as worker
real, done = worker.compile_request, []
def astray(request, *rest):  # the first {n} compiles under another Triton than the parent's
    done.append(request["name"])
    if len(done) <= {n}:
        request["triton_key"] = "another-triton"
    return real(request, *rest)
worker.compile_request = astray
worker.main()
"""


@needs_ptxas
def test_a_kernel_compiled_under_another_key_is_compiled_here_and_the_pool_stays(tmp_path):
    """One kernel a worker compiles under another cache key than the parent computes is compiled
    by the parent (one log line says where the keys differ) and the pool stays on; when no
    compile of a batch is under the parent's keys, the pool is turned off with one warning."""
    out = run_script(tmp_path, '''
        import logging
        from pipec_runtime_cudagraph import compile_worker
        from test_runtime_compile_pool import ASTRAY_BOOT

        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("pipec.runtime").addHandler(handler)

        compile_worker.BOOT = ASTRAY_BOOT.format(n=1)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            runner, profile = first_call_compiles("kernels", workers=1)  # one worker: both configs in order
        assert not [w for w in caught if str(w.message).startswith("pipec")], [str(w.message) for w in caught]
        counts = profile.to_dict()["counts"]
        assert counts["triton_compiles_in_workers"] == 1 and counts["triton_compile_worker_errors"] == 1, counts
        assert sorted(hit for _, hit, _ in compiles) == [False, True], compiles  # one compiled here
        [record] = [r for r in records if "another cache key" in r.getMessage()]
        assert "another-triton" in record.getMessage(), record.getMessage()
        assert compile_pool.get_pool(1) is not None

        compile_pool.shutdown()
        compile_worker.BOOT = ASTRAY_BOOT.format(n=2)
        triton.knobs.cache.dir = os.path.abspath("triton-2")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            first_call_compiles("kernels2", workers=1)
        messages = [str(w.message) for w in caught if str(w.message).startswith("pipec")]
        assert len(messages) == 1 and "not under the cache keys" in messages[0], messages
        assert compile_pool.get_pool(1) is None
        print("ok")
    ''')
    assert "ok" in out


@needs_ptxas
def test_workers_use_the_ptxas_the_parent_switched_to_after_they_started(tmp_path):
    """Inductor points TRITON_PTXAS_PATH at torch's own ptxas when it first compiles, which can
    be after pipec's workers started; the ptxas version is part of Triton's cache key, so each
    request carries the parent's ptxas (path, and version as the parent's Triton cached it) and
    the workers compile with it (on the H200 every kernel was compiled twice, and the pool
    turned off, without this)."""
    ptxas = tmp_path / "other-ptxas"
    out = run_script(tmp_path, f'''
        from triton.backends.nvidia.compiler import get_ptxas, get_ptxas_version
        real = get_ptxas(90).path
        with open({str(ptxas)!r}, "w") as f:  # the same compiler, another build date
            f.write("#!/bin/sh\\n"
                    f'if [ "$1" = "--version" ]; then "{{real}}" --version | sed "s/Built on .*/Built on another day/"; '
                    f'else exec "{{real}}" "$@"; fi\\n')
        os.chmod({str(ptxas)!r}, 0o755)
        compile_pool.warm(2)  # the workers start with Triton's own ptxas
        os.environ["TRITON_PTXAS_PATH"] = os.environ["TRITON_PTXAS_BLACKWELL_PATH"] = {str(ptxas)!r}
        get_ptxas_version.cache_clear()
        assert "another day" in get_ptxas_version(90)
        runner, profile = first_call_compiles("kernels", workers=2)
        counts = profile.to_dict()["counts"]
        assert counts["triton_compiles_in_workers"] == 2 and not counts.get("triton_compile_worker_errors"), counts
        assert [hit for _, hit, _ in compiles] == [True] * 2, compiles
        print("ok")
    ''')
    assert "ok" in out


def test_pool_size_follows_the_cores(monkeypatch):
    assert compile_pool.pool_size(0) == 0  # off
    assert compile_pool.pool_size(5) == 5
    for cores, size in ((1, 0), (2, 0), (3, 3), (16, 16), (128, compile_pool.MAX_WORKERS)):
        monkeypatch.setattr(compile_pool, "available_cores", lambda cores=cores: cores)
        assert compile_pool.pool_size(None) == size


def test_only_jit_functions_go_to_workers(monkeypatch):
    """What is not a module-level `@triton.jit` function (a stand-in here) is compiled in the parent."""
    # the pool is process state: on a GPU host an earlier test of this process may have started it
    monkeypatch.setattr(compile_pool, "_pool", None)

    class Kernel:
        def warmup(self, *args, **kwargs):
            raise AssertionError("not compiled")

    jobs = [(Kernel(), [], [], (1,), {}), (Kernel(), [], [], (1,), {})]
    assert compile_pool.compile_in_workers(jobs, 2) == 0
    assert compile_pool._pool is None


def test_workers_that_cannot_start_turn_the_pool_off_with_one_warning(monkeypatch):
    monkeypatch.setattr(compile_pool, "_pool", None)
    monkeypatch.setattr(compile_pool, "_disabled", None)  # restored after the test: the pool is process state
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    with pytest.warns(RuntimeWarning, match="could not start compile workers") as caught:
        assert compile_pool.get_pool(2) is None
        assert compile_pool.get_pool(2) is None  # off for the process: no second try, no second warning
    assert len(caught) == 1
    assert compile_pool.start_in_workers([object(), object()], 2) is None


def test_triton_key_is_computed_in_the_background_once_when_a_gpu_compile_starts(monkeypatch):
    """warm_compile_workers (called when a compile starts) computes Triton's cache key in a thread
    while the front end traces, once per process; without CUDA it starts nothing."""
    import torch
    import triton.runtime.cache as triton_cache

    from pipec_runtime_cudagraph import compile_pool, stages

    calls = []
    monkeypatch.setattr(compile_pool, "warm", lambda size: None)  # no worker processes here
    monkeypatch.setattr(triton_cache, "triton_key", lambda: calls.append(1) or "key")
    stages.warm_triton_key.cache_clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    stages.warm_compile_workers()
    assert stages.warm_triton_key.cache_info().currsize == 0
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    try:
        stages.warm_compile_workers()
        thread = stages.warm_triton_key()
        assert thread is not None and thread.daemon
        thread.join(5)
        stages.warm_compile_workers()  # once per process
        assert stages.warm_triton_key() is thread and calls == [1]
    finally:
        stages.warm_triton_key.cache_clear()  # the real key is computed where a real compile needs it


def test_workers_build_each_signatures_launcher_once():
    """A Triton whose launcher is a C module per signature (3.6 and older) gets it built in the
    worker, once per signature: kernels with the same argument types and constants share one; a
    Triton with a generic launcher, or a build that fails, builds nothing and fails no job."""
    from types import SimpleNamespace

    from pipec_runtime_cudagraph.compile_worker import build_launcher

    built_for = []

    class Launcher:
        def __init__(self, src, metadata):
            built_for.append(src.fn.name)

    per_signature = SimpleNamespace(make_launcher=object(), CudaLauncher=Launcher)

    def kernel(name, signature, constants):
        fn = SimpleNamespace(name=name, arg_names=list(signature))
        return SimpleNamespace(src=SimpleNamespace(fn=fn, signature=signature, constants=constants),
                               metadata=SimpleNamespace(tensordesc_meta=None))

    add = kernel("add", {"x": "*fp32", "y": "*fp32", "n": "i32"}, {})
    mul = kernel("mul", {"x": "*fp32", "y": "*fp32", "n": "i32"}, {})  # add's signature: add's launcher
    one = kernel("one", {"x": "*fp32", "y": "*fp32", "n": "i32"}, {(2,): 1})  # n specialized to 1: its own
    half = kernel("half", {"x": "*bf16", "y": "*bf16", "n": "i32"}, {})
    built: set = set()
    assert [build_launcher(k, built, per_signature) for k in (add, mul, one, half)] == [True, False, True, True]
    assert built_for == ["add", "one", "half"]

    generic = SimpleNamespace(CudaLauncher=Launcher)  # Triton >= 3.7: one launcher for every kernel
    assert build_launcher(kernel("k", {"x": "*fp16"}, {}), set(), generic) is False

    class Broken:
        def __init__(self, src, metadata):
            raise RuntimeError("no C compiler")
    assert build_launcher(add, set(), SimpleNamespace(make_launcher=object(), CudaLauncher=Broken)) is False
    assert built_for == ["add", "one", "half"]


def test_the_longest_compiles_go_to_the_workers_first():
    """Gluon GEMMs, then pipelined kernels (GEMM templates), then the rest; equals in graph order."""
    from pipec_runtime_cudagraph.compile_pool import longest_first

    def request(name, stages=1, warps=4, gluon=False):
        return ({"name": name, "gluon": gluon, "options": {"num_stages": stages, "num_warps": warps}}, b"", None)
    batch = [request("add_0"), request("mm_1", stages=3, warps=8), request("sum_2", warps=8),
             request("mm_3_pingpong", stages=4, gluon=True), request("add_4"), request("mm_5", stages=4)]
    assert [r[0]["name"] for r in longest_first(batch)] == ["mm_3_pingpong", "mm_5", "mm_1", "sum_2", "add_0", "add_4"]
    assert longest_first([]) == []

"""Wall-clock split of pipec's first BERT-base training step on the GPU (train_step.py's bert case),
without cProfile: pipec's compile-time profile (parts and counts) and timers around named functions
of pipec and Triton (main thread, outermost call only; cProfile's split is unreliable here, as the
compile threads hold the GIL). Cold or warm by the caches it is given:

    export TORCHINDUCTOR_CACHE_DIR=/tmp/b-ind PIPEC_CACHE_DIR=/tmp/b-pipec TRITON_CACHE_DIR=/tmp/b-triton PIPEC_KERNEL_DIR=/tmp/b-k
    python benchmarks/bert_first_step_timers.py            # cold: fills the caches
    python benchmarks/bert_first_step_timers.py            # warm: a new process
    PIPEC_LAUNCH_STORE=0 python benchmarks/bert_first_step_timers.py   # warm, every kernel through Triton

Prints one JSON object. Results: benchmarks/results/bert_first_step_timers_h100_s32.txt."""
import collections
import functools
import importlib
import json
import sys
import os
import threading
import time
import traceback

sys.path.insert(0, "benchmarks")
import torch  # noqa: E402
import train_step as ts  # noqa: E402

TOTAL: dict[str, float] = collections.defaultdict(float)
COUNT: collections.Counter = collections.Counter()
DEPTH: collections.Counter = collections.Counter()
MAIN = threading.main_thread().ident
# PIPEC_TIMERS_CALLERS=label,...: also count who called these (the pipec and Triton frames above)
CALLERS_OF = set(filter(None, os.environ.get("PIPEC_TIMERS_CALLERS", "").split(",")))
CALLERS: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)

# (module, attribute[, label, class]): what is timed
TIMED = [
    ("pipec_capture.attention", "cudnn_attention_checked"),
    ("pipec_runtime_cudagraph.kernels", "load_kernel"),
    ("pipec_runtime_cudagraph.autotune", "compile_all"),
    ("pipec_runtime_cudagraph.specialize", "build_specialized"),
    ("pipec_runtime_cudagraph.views", "collapse_view_chains"),
    ("pipec_ir.serialize", "loads"),
    ("pipec_runtime_cudagraph.compile_pool", "compiled_already"),
    ("pipec_runtime_cudagraph.runner", "_build", "runner._build", "ProgramRunner"),
    # the first run, split: the general run's launches, the launch store, launcher binding, externs
    ("pipec_runtime_cudagraph.runner", "run", "runner.run", "ProgramRunner"),
    ("pipec_runtime_cudagraph.runner", "_specialize", "runner._specialize", "ProgramRunner"),
    ("pipec_runtime_cudagraph.steps", "__call__", "LaunchStep.__call__", "LaunchStep"),
    ("pipec_runtime_cudagraph.steps", "__call__", "ExternStep.__call__", "ExternStep"),
    ("pipec_runtime_cudagraph.steps", "launcher", "LaunchStep.launcher", "LaunchStep"),
    ("pipec_runtime_cudagraph.launch_store", "key", "LaunchStore.key", "LaunchStore"),
    ("pipec_runtime_cudagraph.launch_store", "get", "LaunchStore.get", "LaunchStore"),
    ("pipec_runtime_cudagraph.launch_store", "loads", "LaunchStore.loads", "LaunchStore"),
    ("pipec_runtime_cudagraph.launch_store", "put", "LaunchStore.put", "LaunchStore"),
    ("pipec_runtime_cudagraph.static_launch", "load_cubin"),
    ("pipec_runtime_cudagraph.fastlaunch", "bind_launcher"),
    ("triton.runtime.jit", "warmup", "JITFunction.warmup", "JITFunction"),
    ("triton.runtime.jit", "run", "JITFunction.run", "JITFunction"),
]


def timed(label, f):
    @functools.wraps(f)
    def wrapper(*args, **kwargs):
        if threading.get_ident() != MAIN:
            return f(*args, **kwargs)
        DEPTH[label] += 1
        if label in CALLERS_OF and DEPTH[label] == 1:
            frames = [f for f in traceback.extract_stack()[:-1] if "pipec" in f.filename or "triton" in f.filename]
            CALLERS[label][" < ".join(f"{f.name}:{f.lineno}" for f in frames[-4:][::-1])] += 1
        start = time.perf_counter()
        try:
            return f(*args, **kwargs)
        finally:
            DEPTH[label] -= 1
            if not DEPTH[label]:
                TOTAL[label] += time.perf_counter() - start
                COUNT[label] += 1
    return wrapper


def patch(modname, attr, label=None, cls=None):
    """Wrap `modname.attr` (or `modname.cls.attr`), also where a pipec module imported it by name."""
    module = importlib.import_module(modname)
    owner = getattr(module, cls) if cls else module
    original = getattr(owner, attr)
    wrapped = timed(label or f"{modname.split('.')[-1]}.{attr}", original)
    setattr(owner, attr, wrapped)
    if cls is None:
        for mod in list(sys.modules.values()):
            if getattr(mod, "__name__", "").startswith("pipec") and getattr(mod, attr, None) is original:
                setattr(mod, attr, wrapped)


def main() -> None:
    for spec in TIMED:
        patch(*spec)
    step, session = ts.pipec_cuda_step("bert")
    start = time.perf_counter()
    with ts.first_call_profile(session):
        step()
        torch.cuda.synchronize()
    wall = time.perf_counter() - start
    start = time.perf_counter()
    step()
    torch.cuda.synchronize()
    second = time.perf_counter() - start
    profile = session.profile.to_dict()
    print(json.dumps({"wall": round(wall, 3), "second_step": round(second, 3),
                      "parts": {k: round(v, 3) for k, v in profile["seconds"].items()}, "counts": profile["counts"],
                      "timers": {k: [round(v, 3), COUNT[k]] for k, v in sorted(TOTAL.items(), key=lambda x: -x[1])},
                      "callers": {k: dict(c.most_common(12)) for k, c in CALLERS.items()}},
                     indent=1))


if __name__ == "__main__":
    main()

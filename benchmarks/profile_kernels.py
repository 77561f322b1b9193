"""Where the GPU time goes: per-kernel times of eager, TorchInductor and pipec on one model file.

    python benchmarks/profile_kernels.py benchmarks/models/gpt2_block_bf16.py --out $OUT/profile.json
    python benchmarks/profile_kernels.py benchmarks/models/gpt2_small_fp32.py --backends pipec_cudagraph,inductor_ro

The model file is what `pipec bench` takes (`model`, `example_inputs()`). Each backend is compiled,
run a few times to warm up, then `--calls` calls are recorded with torch.profiler (CUDA activity):
per kernel name its calls and GPU microseconds per model call, the kernels' sum, and the wall time
per call measured around the profiled calls. The gap between wall time and kernel sum is launch
overhead and idle GPU; kernels named like pipec's (`k<n>_...`) or Inductor's (`triton_...`) are
generated code, the rest are library calls (cuBLAS `*gemm*`, flash attention, ATen copies).
Prints the top `--top` kernels per backend; writes everything as JSON. `--gaps` also sums the idle
time between consecutive kernels by the kinds of the two (library GEMM, attention, generated...):
where a CUDA Graph's replay loses time its kernels do not account for. `--copies` also records
where each ATen copy is called from (the host ops `aten::copy_`, `contiguous`, `clone`, with their
shapes, strides and Python stack): the sites of the copies a kernel profile shows only by name.
Backend `pipec_timed` compiles with `tuning_table=False` (every launch config and GEMM choice
timed, none read from the shipped table): beside `pipec`, what the table's picks cost.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

BACKENDS = ("eager", "inductor", "inductor_ro", "pipec", "pipec_timed", "pipec_cudagraph")


def build(backend: str, model):
    import pipec

    torch._dynamo.reset()
    if backend == "eager":
        return model
    if backend == "inductor":
        return torch.compile(model)
    if backend == "inductor_ro":
        return torch.compile(model, mode="reduce-overhead")
    if backend == "pipec":
        return pipec.compile(model)
    if backend == "pipec_timed":  # every pick timed, none read from the shipped tuning table
        return pipec.compile(model, tuning_table=False)
    if backend == "pipec_cudagraph":
        return pipec.compile(model, mode="reduce-overhead")
    raise SystemExit(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")


COPY_OPS = ("aten::copy_", "aten::contiguous", "aten::clone", "aten::_to_copy")


def _python_frames(event, depth: int = 4) -> tuple[str, ...]:
    """The Python frames (profiler events named `file.py(line): function`) above `event`, innermost
    first, without torch's own."""
    frames, parent = [], event.cpu_parent
    while parent is not None and len(frames) < depth:
        if "): " in parent.name and "torch/" not in parent.name:
            frames.append(parent.name)
        parent = parent.cpu_parent
    if not frames:  # with CUDA activity on, the Python function events need not parent the op:
        # the op's own recorded stack (innermost first) names the same frames
        frames = [f for f in (getattr(event, "stack", None) or []) if "torch/" not in f][:depth]
    return tuple(frames)


def copy_sites(events, calls: int) -> list[dict]:
    """Per (copy op, shapes, Python frames) the copies made per model call, most first: each
    `aten::copy_` is reported as the outermost copy op around it (contiguous -> clone -> copy_),
    and a `contiguous` that copies nothing is not reported."""
    sites: dict[tuple, int] = defaultdict(int)
    for event in events:
        if event.name != "aten::copy_":
            continue
        outer = event
        while outer.cpu_parent is not None and outer.cpu_parent.name in COPY_OPS:
            outer = outer.cpu_parent
        sites[(outer.name, str(outer.input_shapes), _python_frames(outer))] += 1
    return [{"op": op, "shapes": shapes, "stack": list(stack), "calls": n / calls}
            for (op, shapes, stack), n in sorted(sites.items(), key=lambda kv: -kv[1])]


def kernel_kind(name: str) -> str:
    """A GPU activity's kind, for the gaps between kernels: library GEMMs, attention, pipec's
    Gluon ping-pong GEMMs, its Triton GEMM templates, other generated kernels, memsets, copies."""
    n = name.lower()
    for kind, marks in (("memset", ("memset",)), ("memcpy", ("memcpy",)),
                        ("library gemm", ("nvjet", "gemm", "cutlass")),
                        ("attention", ("cudnn", "flash", "sdpa", "fmha")), ("gluon gemm", ("pingpong",)),
                        ("triton gemm", ("mm_epilogue", "_tma", "fused_mm_", "fused_addmm", "fused_bmm"))):
        if any(m in n for m in marks):
            return kind
    return "generated" if n.startswith(("pipec", "triton")) else "other"


def kernel_gaps(events, calls: int, boundary_us: float = 30.0) -> dict:
    """The idle time between consecutive kernels of `calls` profiled calls, by (kind before, kind
    after): count per call, sum per call, median and minimum. A gap over `boundary_us` is a call
    boundary or a host stall: listed apart, not summed. A negative gap is an overlap (a kernel
    launched with programmatic dependent launch starting before the one ahead ended)."""
    import statistics

    kernels = sorted((e for e in events if e.device_type == torch.autograd.DeviceType.CUDA),
                     key=lambda e: e.time_range.start)
    pairs: dict[tuple[str, str], list[float]] = defaultdict(list)
    long = []
    for a, b in zip(kernels, kernels[1:]):
        gap = b.time_range.start - a.time_range.end
        if gap > boundary_us:
            long.append({"us": gap, "before": a.name[:80], "after": b.name[:80]})
        else:
            pairs[(kernel_kind(a.name), kernel_kind(b.name))].append(gap)
    rows = sorted(({"before": p, "after": n, "count": len(v) / calls, "us": sum(v) / calls,
                    "median_us": statistics.median(v), "min_us": min(v)} for (p, n), v in pairs.items()),
                  key=lambda r: -r["us"])
    return {"us": sum(r["us"] for r in rows), "pairs": rows, "long": sorted(long, key=lambda r: -r["us"])[:10]}


def profile_backend(fn, inputs, calls: int, copies: bool = False, gaps: bool = False) -> dict:
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad():
        for _ in range(3):
            fn(*inputs)
        torch.cuda.synchronize()
        activities = [ProfilerActivity.CUDA] + ([ProfilerActivity.CPU] if copies else [])
        with profile(activities=activities, record_shapes=copies, with_stack=copies) as prof:
            start = time.perf_counter()
            for _ in range(calls):
                fn(*inputs)
            torch.cuda.synchronize()
            wall_us = (time.perf_counter() - start) * 1e6 / calls
    per_kernel: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        row = per_kernel[event.name]
        row[0] += 1
        row[1] += event.device_time
    kernels = sorted(({"name": n, "calls": c / calls, "us": t / calls} for n, (c, t) in per_kernel.items()),
                     key=lambda r: -r["us"])
    row = {"wall_us": wall_us, "kernel_us": sum(k["us"] for k in kernels),
           "launches": sum(k["calls"] for k in kernels), "kernels": kernels}
    if copies:
        row["copy_sites"] = copy_sites(prof.events(), calls)
    if gaps:
        row["gaps"] = kernel_gaps(prof.events(), calls)
    return row


def parse_and_load(doc: str, script: str, backends: str, calls: int, top: int):
    """The command line this script and host_profile.py share -> (args, model, inputs, results
    skeleton). The model moves to its inputs' device, as `pipec bench` does."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("model_file", type=Path)
    parser.add_argument("--backends", default=backends, help=f"comma list of {', '.join(BACKENDS)}")
    parser.add_argument("--calls", type=int, default=calls)
    parser.add_argument("--top", type=int, default=top)
    parser.add_argument("--out", default=None, help="results JSON path")
    parser.add_argument("--copies", action="store_true",
                        help="also record where ATen copies are called from (host stacks; slower calls)")
    parser.add_argument("--gaps", action="store_true",
                        help="also sum the idle time between kernels by the kinds of the kernels around it")
    parser.add_argument("--log-tuning", action="store_true",
                        help="print what pipec's autotuning picks (configs, choice groups) as it times them")
    args = parser.parse_args()
    if args.log_tuning:
        import logging

        logging.basicConfig(format="%(name)s: %(message)s")
        logging.getLogger("pipec.tuning").setLevel(logging.INFO)
    if not torch.cuda.is_available():
        raise SystemExit(f"{script} needs a CUDA GPU")
    from pipec.model_file import load_model_file

    sys.path.insert(0, str(args.model_file.resolve().parent))
    model, inputs, name = load_model_file(args.model_file)
    model = model.to(next(t.device for t in inputs if isinstance(t, torch.Tensor)))
    return args, model, inputs, {"model": name, "device": torch.cuda.get_device_name(), "backends": {}}


def main() -> int:
    args, model, inputs, results = parse_and_load(__doc__, "profile_kernels.py", "eager,inductor,pipec", 10, 15)
    name = results["model"]
    for backend in args.backends.split(","):
        t0 = time.perf_counter()
        fn = build(backend, model)
        row = profile_backend(fn, inputs, args.calls, copies=args.copies, gaps=args.gaps)
        row["setup_s"] = time.perf_counter() - t0
        results["backends"][backend] = row
        print(f"\n== {name} / {backend}: wall {row['wall_us']:.1f} us/call, kernels {row['kernel_us']:.1f} us, "
              f"{row['launches']:.0f} launches (setup {row['setup_s']:.1f} s)", flush=True)
        for k in row["kernels"][: args.top]:
            print(f"  {k['us']:9.1f} us  x{k['calls']:<5g} {k['name'][:110]}")
        if "gaps" in row:
            print(f"  gaps between kernels: {row['gaps']['us']:.1f} us/call")
            for g in row["gaps"]["pairs"][: args.top]:
                print(f"  {g['us']:9.1f} us  x{g['count']:<5g} median {g['median_us']:5.2f}  {g['before']} -> {g['after']}")
        for site in row.get("copy_sites", [])[: args.top]:
            print(f"  copy x{site['calls']:<5g} {site['op']} {site['shapes'][:80]}")
            for frame in site["stack"]:
                print(f"      {frame[:120]}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

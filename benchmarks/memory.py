"""Peak memory of one call: eager, TorchInductor and pipec, per model file (issue 19, "Memory").

    python benchmarks/memory.py benchmarks/models/gpt2_block_bf16.py MODEL.py ... [--json out.json]
    python benchmarks/memory.py MODEL.py --mode reduce-overhead      # pipec's and Inductor's CUDA Graphs
    python benchmarks/memory.py MODEL.py --inputs small_inputs       # another inputs function of the file

A model file is what `pipec bench` takes: `model` and `example_inputs` (a tuple, or a function
returning one). Each backend is compiled, called three times (compiles, autotuning, the
specialized run), then one more call is measured under `torch.no_grad()`:

* on CUDA: `torch.cuda.max_memory_allocated()` during that call, minus `memory_allocated()` just
  before it (weights, inputs and whatever the backend keeps at rest are not counted: what a call
  adds on top of them);
* without CUDA: eager's peak from torch.profiler's CPU memory events, and pipec's from its
  Programs (`pipec_runtime_cudagraph.memory.peak_report`: the plan compiled for these inputs,
  every value allocated at its first write and freed after its last reader; no kernel runs),
  both the planned figure (slots, as the general path and a CUDA Graph capture allocate) and
  the liveness bound (each value freed right after its last reader, as a specialized run does),
  for the default alternatives and the worst alternative a choice group could pick.

pipec's plan figures are printed on CUDA too, beside the measurement, so a gap between them
(something the plan does not model: a library's own scratch, a copy the runtime makes) shows.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def load(path: str, inputs_name: str):
    """(model, inputs) of a model file: its `inputs_name` where it has one, else example_inputs."""
    from pipec.model_file import load_model_module

    model, inputs, _, module = load_model_module(Path(path), "model", "example_inputs")
    chosen = getattr(module, inputs_name, None)
    if chosen is not None:
        inputs = chosen() if callable(chosen) else chosen
    return model, tuple(inputs)


def _cuda_peak(fn, inputs) -> int:
    """Bytes one call adds at its peak above what was allocated before it (after warm-up)."""
    for _ in range(3):
        out = fn(*inputs)
        del out
    torch.cuda.synchronize()
    gc.collect()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    out = fn(*inputs)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    del out
    return peak


def _cpu_peak(fn, inputs) -> int:
    """The most bytes allocated at once during one call, from the profiler's CPU memory events."""
    from torch.profiler import ProfilerActivity, profile

    fn(*inputs)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn(*inputs)
    del out
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


def _runners() -> dict:
    """{id: runner} of every pipec ProgramRunner alive in this process."""
    from pipec_runtime_cudagraph.launch import ProgramRunner

    return {id(o): o for o in gc.get_objects() if type(o) is ProgramRunner}


def compiled_programs(model, inputs, **compile_kwargs) -> list:
    """pipec's Programs for `model` on `inputs`, compiled through Dynamo without running any
    kernel (each graph runs eagerly once it is compiled)."""
    from pipec.api import make_options
    from pipec.pipeline import compile_graph
    from pipec.plugins import get_registry

    options = make_options(**compile_kwargs)
    programs = []

    def compile_aten_graph(gm, example_inputs, kind="inference"):
        programs.append(compile_graph(gm, example_inputs, options, name=f"graph_{len(programs)}",
                                      stop_after="codegen"))
        return lambda args: gm(*args)

    capture = get_registry().get("capture", options.capture)
    torch._dynamo.reset()
    try:
        with torch.no_grad():
            torch.compile(model, backend=capture.dynamo_backend(compile_aten_graph, options))(*inputs)
    finally:
        torch._dynamo.reset()
    return programs


def plan_figures(programs: list) -> dict:
    """Per Program its peak_report, and the largest over the Programs (the graphs of one call run
    one after another: a call holds at least the largest, plus the outputs earlier graphs pass on)."""
    from pipec_runtime_cudagraph.memory import peak_report

    reports = {p.name: peak_report(p) for p in programs}
    return {
        "graphs": reports,
        "planned_default": max((r["default"]["planned"] for r in reports.values()), default=0),
        "bound_default": max((r["default"]["bound"] for r in reports.values()), default=0),
        "planned_worst": max((r["worst"] for r in reports.values()), default=0),
    }


def measure_cuda(model, inputs, mode: str, backends: list[str]) -> dict:
    import pipec

    out = {}
    with torch.no_grad():
        for backend in backends:
            torch._dynamo.reset()
            gc.collect()
            if backend == "eager":
                fn = model
            elif backend == "inductor":
                fn = torch.compile(model, mode=None if mode == "default" else mode)
            else:
                fn = pipec.compile(model, mode=mode)
            before = _runners() if backend == "pipec" else {}
            out[backend] = _cuda_peak(fn, inputs)
            if backend == "pipec":  # the runners this model's compile made
                out["pipec_plan"] = plan_figures([r.program for k, r in _runners().items() if k not in before])
            del fn
    torch._dynamo.reset()
    return out


def measure_cpu(model, inputs, backends: list[str]) -> dict:
    out = {}
    with torch.no_grad():
        if "eager" in backends:
            out["eager"] = _cpu_peak(model, inputs)
    if "pipec" in backends:
        out["pipec_plan"] = plan_figures(compiled_programs(model, inputs))
    return out


def _mib(n) -> str:
    if n is None:
        return "-"
    return f"{n / MIB:.1f} MiB" if n >= MIB else f"{n / 1024:.1f} KiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="model files (model, example_inputs)")
    parser.add_argument("--inputs", default="example_inputs",
                        help="the inputs name in each file (a file without it: example_inputs)")
    parser.add_argument("--mode", default="default", choices=("default", "reduce-overhead"))
    parser.add_argument("--backends", default="eager,inductor,pipec")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    backends = [b for b in args.backends.split(",") if b]
    cuda = torch.cuda.is_available()
    results = {"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
               "mode": args.mode, "models": {}}
    for path in args.models:
        model, inputs = load(path, args.inputs)
        r = measure_cuda(model, inputs, args.mode, backends) if cuda else measure_cpu(model, inputs, backends)
        results["models"][path] = r
        plan = r.get("pipec_plan", {})
        measured = "  ".join(f"{b} {_mib(r.get(b))}" for b in backends if b in r)
        print(f"{Path(path).stem}: {measured or '(nothing measured)'}"
              + (f"  | pipec plan: default {_mib(plan['planned_default'])} (bound {_mib(plan['bound_default'])}),"
                 f" worst alternative {_mib(plan['planned_worst'])}" if plan else ""))
        if "eager" in r and plan:
            worst = plan["planned_worst"] if not cuda else r.get("pipec", plan["planned_worst"])
            print(f"  pipec <= eager: {worst <= r['eager']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

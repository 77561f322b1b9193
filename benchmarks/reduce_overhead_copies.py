"""reduce-overhead against launch, on memory-bound and launch-bound cases (issue 19 item 4).

    python benchmarks/reduce_overhead_copies.py [--inductor] [--out FILE]

Cases: the fp32 pointwise chain of benchmarks/models/pointwise_fp32.py (3 inputs of 2^26), the
bf16 layer_norm of benchmarks/models/layer_norm_bf16.py (16384 x 4096), and runtime_overhead.py's
MLP8 (fp32, 8 small Linear layers: launch-bound). Each is compiled with pipec's `launch` runtime
(mode="default") and its `cudagraph` runtime (mode="reduce-overhead"), and with --inductor also
with torch.compile(mode="reduce-overhead"); each is checked against eager, then timed with
triton.testing.do_bench (median), in three rounds of rotated order (each backend's time is its
rounds' median), in two loops:
* `dropped`: the outputs of a call are dropped before the next (a benchmark loop, `loss.item()`);
* `held`: the last outputs are kept during the next call (`y = model(x)` in a loop).
The target: reduce-overhead within 5% of launch on the memory-bound cases, and faster than it
on the launch-bound one. Prints a table; --out also writes it as JSON.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch
import triton.testing

import pipec

ROOT = Path(__file__).resolve().parent


def load(path: Path, name: str):
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def cases():
    pointwise = load(ROOT / "models" / "pointwise_fp32.py", "bench_pointwise_fp32")
    yield "pointwise fp32 3x2^26", pointwise.model, pointwise.example_inputs(), {}
    layer_norm = load(ROOT / "models" / "layer_norm_bf16.py", "bench_layer_norm_bf16")
    yield "layer_norm bf16 16384x4096", layer_norm.model.cuda(), layer_norm.example_inputs(), \
        {"atol": 2e-2, "rtol": 2e-2}
    overhead = load(ROOT / "runtime_overhead.py", "bench_runtime_overhead")
    torch.manual_seed(0)
    yield "MLP8 fp32 32x64 (launch-bound)", overhead.MLP8().cuda().eval(), (torch.randn(32, 64, device="cuda"),), {}


def times_of(rows: list, backend: str, loop: str) -> float:
    return next(r["ms"] for r in rows if r["backend"] == backend and r["loop"] == loop)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inductor", action="store_true", help="also time torch.compile(mode='reduce-overhead')")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args()
    rows = []
    for name, model, inputs, tol in cases():
        with torch.no_grad():
            want = model(*inputs)
            backends = {"launch": pipec.compile(model), "reduce-overhead": pipec.compile(model, mode="reduce-overhead")}
            if args.inductor:
                backends["inductor reduce-overhead"] = torch.compile(model, mode="reduce-overhead")
            for label, fn in backends.items():
                for _ in range(3):  # compile, record, settle
                    torch.testing.assert_close(fn(*inputs), want, **tol, msg=lambda m, label=label, name=name: f"{name}, {label}: {m}")
            times: dict[tuple, list] = {}
            for r in range(3):
                labels = list(backends)
                for label in labels[r % len(labels):] + labels[:r % len(labels)]:
                    fn = backends[label]
                    held = [None]

                    def dropped(fn=fn, inputs=inputs):
                        fn(*inputs)

                    def keep(fn=fn, held=held, inputs=inputs):
                        held[0] = fn(*inputs)

                    for loop, call in (("dropped", dropped), ("held", keep)):
                        ms = triton.testing.do_bench(call, warmup=25, rep=100, return_mode="median")
                        times.setdefault((label, loop), []).append(ms)
                    held[0] = None
        if not rows:
            print(f"{'case':32} {'backend':26} {'loop':8} {'ms':>9} {'/ launch':>9}", flush=True)
        new = [{"case": name, "backend": label, "loop": loop, "ms": statistics.median(samples)}
               for (label, loop), samples in times.items()]
        for r in new:
            r["vs_launch"] = r["ms"] / times_of(new, "launch", r["loop"])
            print(f"{r['case']:32} {r['backend']:26} {r['loop']:8} {r['ms']:9.4f} {r['vs_launch']:9.3f}", flush=True)
        rows += new
        torch._dynamo.reset()
    if args.out:
        Path(args.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                              "rows": rows}, indent=1))


if __name__ == "__main__":
    main()

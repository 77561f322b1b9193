"""Time every example on the GPU: eager vs TorchInductor vs pipec, in one run.

    python benchmarks/examples.py [--json out.json]

Checks each compiled result against eager (torch.testing.assert_close) before timing,
and times with triton.testing.do_bench (median ms). Needs CUDA.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pathlib
import sys

import torch
import triton.testing

import pipec

ROOT = pathlib.Path(__file__).resolve().parent.parent


def load(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    inputs = mod.example_inputs() if callable(mod.example_inputs) else mod.example_inputs
    return mod.model, tuple(inputs)


def flat(out):
    return list(out) if isinstance(out, tuple | list) else [out]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json")
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    dtype = getattr(torch, args.dtype)
    rows = []
    for path in sorted((ROOT / "examples").glob("*.py")):
        model, inputs = load(path)
        model = model.cuda().to(dtype) if isinstance(model, torch.nn.Module) else model
        inputs = tuple(i.cuda().to(dtype) if i.is_floating_point() else i.cuda() for i in inputs)
        row = {"example": path.stem, "dtype": args.dtype}
        with torch.no_grad():
            expected = flat(model(*inputs))
            variants = {
                "eager": model,
                "inductor": torch.compile(model),
                "pipec": pipec.compile(model),
                "pipec_aggressive": pipec.compile(model, fusion="aggressive"),
            }
            for name, fn in variants.items():
                got = flat(fn(*inputs))
                tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
                for g, e in zip(got, expected):
                    torch.testing.assert_close(g, e, **tol)
                row[name + "_ms"] = triton.testing.do_bench(lambda fn=fn, inputs=inputs: fn(*inputs), warmup=50, rep=300)
                torch._dynamo.reset()
        row["pipec_vs_eager"] = row["eager_ms"] / row["pipec_ms"]
        row["pipec_vs_inductor"] = row["inductor_ms"] / row["pipec_ms"]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

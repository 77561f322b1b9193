"""Memory-bound kernel micro-benchmarks on the GPU: eager vs TorchInductor vs pipec (issue 6).

    python benchmarks/kernels.py --out $OUT/kernels [--max-autotune] [--cases softmax,layer_norm|long]
                                 [--pipec-option persistent_reduction_bytes=65536]

Each case is a tiny function; pipec's result is checked against eager with
torch.testing.assert_close at the dtype's tolerance, then every variant is timed with
triton.testing.do_bench (median ms) and reported as achieved bandwidth: bytes read
+ bytes written (inputs, parameters and outputs, each touched once) over the time. The
generated Triton source of every pipec kernel is written to OUT/<case>/ and the rows to
OUT/kernels.json. Needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import tempfile
from dataclasses import dataclass
from collections.abc import Callable

import torch
import torch.nn.functional as F

COPY_LIMIT_TBS = 4.25  # read + write, measured on the H200 (issue 6)


@dataclass
class Case:
    name: str
    fn: Callable
    make_inputs: Callable[[], tuple]
    target_tbs: float | None  # issue 6's bar for pipec, when it sets one


def _randn(*shape, dtype):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def pointwise_chain(a, b, c):
    return F.gelu(a) * torch.sigmoid(b) + c


def softmax(x):
    return torch.softmax(x, dim=-1)


def log_softmax(x):
    return torch.log_softmax(x, dim=-1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)


def rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w, eps=1e-6)


def column_sum(x):
    return x.sum(dim=0)


CASES = {
    "pointwise": Case("pointwise", pointwise_chain,
                      lambda: tuple(_randn(1 << 26, dtype=torch.float32) for _ in range(3)), 0.97 * 4.32),
    "softmax": Case("softmax", softmax, lambda: (_randn(8192, 8192, dtype=torch.bfloat16),), 3.4),
    "log_softmax": Case("log_softmax", log_softmax, lambda: (_randn(8192, 8192, dtype=torch.bfloat16),), None),
    "layer_norm": Case("layer_norm", layer_norm,
                       lambda: (_randn(16384, 4096, dtype=torch.bfloat16), _randn(4096, dtype=torch.bfloat16),
                                _randn(4096, dtype=torch.bfloat16)), 3.9),
    "rms_norm": Case("rms_norm", rms_norm,
                     lambda: (_randn(16384, 4096, dtype=torch.bfloat16), _randn(4096, dtype=torch.bfloat16)), None),
    "column_sum": Case("column_sum", column_sum, lambda: (_randn(16384, 4096, dtype=torch.float32),), None),
    # Long rows: the persistent-row budget (32 KiB of input per row) and the looped passes.
    "layer_norm_16k": Case("layer_norm_16k", layer_norm,
                           lambda: (_randn(4096, 16384, dtype=torch.bfloat16), _randn(16384, dtype=torch.bfloat16),
                                    _randn(16384, dtype=torch.bfloat16)), None),
    "layer_norm_8k_fp32": Case("layer_norm_8k_fp32", layer_norm,
                               lambda: (_randn(8192, 8192, dtype=torch.float32), _randn(8192, dtype=torch.float32),
                                        _randn(8192, dtype=torch.float32)), None),
    "layer_norm_16k_fp32": Case("layer_norm_16k_fp32", layer_norm,
                                lambda: (_randn(4096, 16384, dtype=torch.float32), _randn(16384, dtype=torch.float32),
                                         _randn(16384, dtype=torch.float32)), None),
    "softmax_32k": Case("softmax_32k", softmax, lambda: (_randn(2048, 32768, dtype=torch.bfloat16),), None),
    "log_softmax_32k_fp32": Case("log_softmax_32k_fp32", log_softmax,
                                 lambda: (_randn(2048, 32768, dtype=torch.float32),), None),
    "softmax_vocab": Case("softmax_vocab", softmax, lambda: (_randn(4096, 50304, dtype=torch.bfloat16),), None),
}
LONG_ROWS = ("layer_norm_16k", "layer_norm_8k_fp32", "layer_norm_16k_fp32", "softmax_32k", "log_softmax_32k_fp32",
             "softmax_vocab")


def tolerance(dtype: torch.dtype) -> dict:
    if dtype == torch.float32:
        return dict(atol=1e-4, rtol=1e-4)
    return dict(atol=2e-2, rtol=2e-2)  # bf16 / fp16: one rounding of the output


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def dump_sources(dump_dir: pathlib.Path, dest: pathlib.Path) -> list[str]:
    """Write every kernel of the dumped pipec Programs to dest/<kernel>.py; their names."""
    import pipec_ir

    dest.mkdir(parents=True, exist_ok=True)
    names = []
    for path in sorted(dump_dir.glob("*.codegen.json")):
        program = pipec_ir.loads(path.read_text())
        for k in program.kernels:
            configs = "\n".join(f"#   {dict(c.constants)} num_warps={c.num_warps} num_stages={c.num_stages}"
                                for c in k.configs)
            (dest / f"{k.name}.py").write_text(f"# autotuning candidates (first = untuned):\n{configs}\n{k.source}")
            names.append(k.name)
    return names


def bench(fn, inputs) -> float:
    import triton.testing

    return triton.testing.do_bench(lambda: fn(*inputs), warmup=50, rep=300, return_mode="median")


def run_case(case: Case, args, pipec_options: dict) -> dict:
    import pipec

    inputs = case.make_inputs()
    with torch.no_grad():
        expected = case.fn(*inputs)
    moved = nbytes(inputs) + nbytes([expected])
    row = {"case": case.name, "dtype": str(inputs[0].dtype).removeprefix("torch."),
           "shape": list(inputs[0].shape), "bytes": moved}
    with tempfile.TemporaryDirectory() as dump:
        variants = {"eager": case.fn, "inductor": torch.compile(case.fn)}
        if args.max_autotune:
            variants["inductor_max_autotune"] = torch.compile(case.fn, mode="max-autotune-no-cudagraphs")
        variants["pipec"] = pipec.compile(case.fn, dump_dir=dump, **pipec_options)
        with torch.no_grad():
            for name, fn in variants.items():
                got = fn(*inputs)  # compiles (and autotunes) on the first call
                torch.testing.assert_close(got, expected, **tolerance(expected.dtype))
                ms = bench(fn, inputs)
                row[f"{name}_ms"] = ms
                row[f"{name}_tbs"] = moved / (ms * 1e-3) / 1e12
        row["pipec_kernels"] = dump_sources(pathlib.Path(dump), pathlib.Path(args.out) / case.name)
    for base in [v for v in variants if v not in ("pipec",)]:
        row[f"pipec_vs_{base}"] = row[f"{base}_ms"] / row["pipec_ms"]
    row["pipec_vs_copy_limit"] = row["pipec_tbs"] / COPY_LIMIT_TBS
    if case.target_tbs is not None:
        row["target_tbs"] = case.target_tbs
        row["meets_target"] = row["pipec_tbs"] >= case.target_tbs
    torch._dynamo.reset()
    return row


def summary(row: dict) -> str:
    parts = [f"{row['case']:<12}"]
    for name in ("eager", "inductor", "inductor_max_autotune", "pipec"):
        if f"{name}_ms" in row:
            parts.append(f"{name} {row[f'{name}_ms'] * 1e3:8.1f} us {row[f'{name}_tbs']:5.2f} TB/s")
    parts.append(f"pipec/inductor x{row['pipec_vs_inductor']:.2f}")
    if "target_tbs" in row:
        parts.append(f"target {row['target_tbs']:.2f} TB/s {'MET' if row['meets_target'] else 'MISSED'}")
    parts.append(f"kernels {len(row['pipec_kernels'])}")
    return " | ".join(parts)


def parse_option(text: str):
    """`KEY=VALUE` (a --pipec-option) -> (key, value), as `pipec bench --option` reads it
    (pipec.options.parse_option: true/false, an int, a float, else the string)."""
    from pipec.options import parse_option as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise SystemExit(f"--pipec-option {exc}") from None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="kernels_out", help="directory for kernels.json and the kernel sources")
    parser.add_argument("--cases", default=",".join(c for c in CASES if c not in LONG_ROWS),
                        help=f"comma-separated, from: {', '.join(CASES)}; 'long' = {', '.join(LONG_ROWS)}")
    parser.add_argument("--max-autotune", action="store_true", help="also time Inductor max-autotune-no-cudagraphs")
    parser.add_argument("--pipec-option", action="append", default=[], metavar="KEY=VALUE",
                        help="extra pipec.compile option, e.g. persistent_reduction_bytes=65536")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("benchmarks/kernels.py needs CUDA", file=sys.stderr)
        return 2
    args.cases = ",".join(",".join(LONG_ROWS) if c == "long" else c for c in args.cases.split(","))
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown:
        print(f"unknown case(s): {', '.join(unknown)} (known: {', '.join(CASES)})", file=sys.stderr)
        return 2
    pipec_options = dict(parse_option(o) for o in args.pipec_option)
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    for name in args.cases.split(","):
        row = run_case(CASES[name], args, pipec_options)
        rows.append(row)
        print(summary(row), flush=True)
        (out / "kernels.json").write_text(json.dumps(rows, indent=1))
    print(f"wrote {out / 'kernels.json'} and kernel sources under {out}/<case>/")
    return 0


if __name__ == "__main__":
    sys.exit(main())

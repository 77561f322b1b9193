"""Scatter-family kernels on the GPU: eager vs TorchInductor vs pipec (issue 3).

    python benchmarks/scatter.py --out $OUT/scatter

Cases: embedding backward of a GPT-2-sized vocabulary (many repeated tokens), scatter_add
along rows, and index_put with accumulate. pipec's result is checked against eager first
(assert_close at the dtype's tolerance; float atomics add in another order), then each
variant is timed with triton.testing.do_bench (median ms). Rows go to OUT/scatter.json,
pipec's generated sources to OUT/<case>/. Needs CUDA.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import torch

import pipec


def _embedding_backward(grad, tokens):
    return torch.ops.aten.embedding_dense_backward(grad, tokens, 50257, -1, False)


def _scatter_add(x, index, src):
    return torch.scatter_add(x, 0, index, src)


def _index_put(x, rows, values):
    return torch.ops.aten.index_put(x, [rows], values, True)


def _cases():
    gen = torch.Generator(device="cuda").manual_seed(0)
    tokens = torch.randint(0, 1000, (8, 1024), device="cuda", generator=gen)  # few distinct: heavy contention
    return {
        "embedding_backward_fp32": (_embedding_backward, (torch.randn(8, 1024, 768, device="cuda", generator=gen),
                                                          tokens)),
        "embedding_backward_bf16": (_embedding_backward, (torch.randn(8, 1024, 768, device="cuda", generator=gen)
                                                          .bfloat16(), tokens)),
        "scatter_add_fp32": (_scatter_add, (torch.zeros(4096, 1024, device="cuda"),
                                            torch.randint(0, 4096, (16384, 1024), device="cuda", generator=gen),
                                            torch.randn(16384, 1024, device="cuda", generator=gen))),
        "index_put_accumulate_fp32": (_index_put, (torch.zeros(65536, 256, device="cuda"),
                                                   torch.randint(0, 65536, (262144,), device="cuda", generator=gen),
                                                   torch.randn(262144, 256, device="cuda", generator=gen))),
    }


def main() -> None:
    from triton.testing import do_bench

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for name, (fn, inputs) in _cases().items():
        compiled = pipec.compile(fn, dump_dir=str(out / name))
        expected = fn(*inputs)
        tol = {"rtol": 2e-2, "atol": 2e-2} if expected.dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-3}
        torch.testing.assert_close(compiled(*inputs), expected, **tol)
        inductor = torch.compile(fn)
        row = {"case": name,
               "eager_ms": do_bench(lambda f=fn, a=inputs: f(*a)),
               "inductor_ms": do_bench(lambda f=inductor, a=inputs: f(*a)),
               "pipec_ms": do_bench(lambda f=compiled, a=inputs: f(*a)),
               "pipec_externs": sorted(pipec.explain(fn, *inputs).extern_ops)}
        rows.append(row)
        print(f"{name}: eager {row['eager_ms']:.3f} ms, inductor {row['inductor_ms']:.3f} ms, "
              f"pipec {row['pipec_ms']:.3f} ms, externs {row['pipec_externs'] or 'none'}")
    (out / "scatter.json").write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()

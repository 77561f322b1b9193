"""Query, key and value as three GEMMs against one over their concatenated weights (bf16, cuBLAS
through F.linear with bias; triton.testing.do_bench, L2 flushed before each call, median of 3).

    python benchmarks/qkv_concat.py        # CUDA only

"cat+one" concatenates the weights on every call, as a compiled graph without cached
parameter-derived values would (docs/performance.md, "Q, K and V in one GEMM").
"""

import torch
import torch.nn.functional as F
from triton.testing import do_bench


def time_shape(m: int, h: int) -> dict[str, float]:
    """ms per call of each variant for an [m, h] input and three [h, h] weights."""
    x = torch.randn(m, h, device="cuda", dtype=torch.bfloat16)
    ws = [torch.randn(h, h, device="cuda", dtype=torch.bfloat16) * 0.02 for _ in range(3)]
    bs = [torch.randn(h, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    wc, bc = torch.cat(ws), torch.cat(bs)
    three = [F.linear(x, w, b) for w, b in zip(ws, bs)]
    torch.testing.assert_close(torch.cat(three, dim=1), F.linear(x, wc, bc))  # the same products
    variants = {"three": lambda: [F.linear(x, w, b) for w, b in zip(ws, bs)],
                "one": lambda: F.linear(x, wc, bc),
                "cat+one": lambda: F.linear(x, torch.cat(ws), torch.cat(bs))}
    return {k: sorted(do_bench(f, warmup=25, rep=200) for _ in range(3))[1] for k, f in variants.items()}


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("qkv_concat.py needs a CUDA GPU")
    torch.manual_seed(0)
    for m, h in ((4096, 768), (4096, 1024), (2048, 2048)):
        flops = 2 * m * h * 3 * h
        times = time_shape(m, h)
        print(f"M={m} H={h}: " + ", ".join(f"{k} {t * 1e3:.1f} us ({flops / t / 1e9:.0f} TFLOP/s)"
                                          for k, t in times.items()))


if __name__ == "__main__":
    main()

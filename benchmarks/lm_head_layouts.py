"""RoBERTa's masked-LM head alone (Linear 768 -> 50265, bf16, 8 x 512 tokens): what each backend
returns and how long it takes, on a CUDA GPU.

    python benchmarks/lm_head_layouts.py

A vocabulary of 50265 words gives logits rows that are not 16 bytes long in bf16, and cuBLAS takes
a slow kernel for them. The script prints, per backend (eager, Inductor, pipec), the strides of the
output and the do_bench time; then three ways around the row length: cuBLAS writing into a view of
a padded buffer (mm, and addmm with the bias), and the bias add that copies padded rows into
contiguous ones. Every backend's output is checked against eager's first. Session 47's H100
output is `results/lm_head_h100_s47.txt`: Inductor returns the logits with padded rows (stride
50272, not contiguous), which neither eager nor pipec does.
"""

from __future__ import annotations

import torch
import triton.testing

import pipec  # noqa: F401 - registers torch.compile's "pipec" backend


def bench(fn) -> float:
    return triton.testing.do_bench(fn, warmup=50, rep=300) * 1e3  # microseconds


def main() -> None:
    torch.manual_seed(0)
    lin = torch.nn.Linear(768, 50265, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(8, 512, 768, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        ref = lin(x)
        for name, fn in (("eager", lin), ("inductor", torch.compile(lin)),
                         ("pipec", torch.compile(lin, backend="pipec"))):
            y = fn(x)
            torch.testing.assert_close(y.float(), ref.float(), atol=2e-2, rtol=2e-2)
            print(name, "stride", y.stride(), "contig", y.is_contiguous(), f"{bench(lambda f=fn: f(x)):.1f} us")
        padded = torch.empty(4096, 50272, device="cuda", dtype=torch.bfloat16)
        view, rows, wt = padded[:, :50265], x.view(4096, 768), lin.weight.t()
        print("mm into padded-row view", f"{bench(lambda: torch.mm(rows, wt, out=view)):.1f} us")
        print("addmm into padded-row view", f"{bench(lambda: torch.addmm(lin.bias, rows, wt, out=view)):.1f} us")
        out = torch.empty(4096, 50265, device="cuda", dtype=torch.bfloat16)
        print("bias add padded -> contiguous", f"{bench(lambda: torch.add(view, lin.bias, out=out)):.1f} us")


if __name__ == "__main__":
    if not torch.cuda.is_available():
        raise SystemExit("error: lm_head_layouts.py needs a CUDA GPU")
    main()

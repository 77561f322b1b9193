"""Runtime overhead on the GPU: eager vs TorchInductor vs pipec's `launch` and `cudagraph`.

    python benchmarks/runtime_overhead.py --out $OUT/runtime_overhead.json [--skip-gpt2]

Cases (fp32, inference under torch.no_grad):
* mlp8: 8 x (Linear 64->64, ReLU, residual) at batch 32 — launch-bound.
* gpt2: GPT-2 124M forward at 1 x 128 tokens (written here as plain nn.Modules).
Each is timed with triton.testing.do_bench (its median; do_bench clears L2 before each
call and reports per-call time) for eager, Inductor default, Inductor reduce-overhead,
pipec default (`launch`) and pipec reduce-overhead (`cudagraph`), after checking every
compiled result against eager. Also: `launch` vs `cudagraph` outputs bitwise equal
(autotuning off in both, so both run the same configs), a forced capture failure (a
program whose host sync really is captured: correct results, exactly one warning), and
the peak memory (torch.cuda.max_memory_allocated) of one call of a compiled GPT-2 block
vs eager. Prints a table; writes everything as JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
import warnings

import torch
import torch.nn.functional as F
from torch import nn

# ------------------------------------------------------------------ models


class LinearReluResidual(nn.Module):
    def __init__(self, width: int = 64):
        super().__init__()
        self.lin = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.lin(x))


class MLP8(nn.Module):
    def __init__(self, width: int = 64, depth: int = 8):
        super().__init__()
        self.blocks = nn.Sequential(*[LinearReluResidual(width) for _ in range(depth)])

    def forward(self, x):
        return self.blocks(x)


class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(d, 3 * d)
        self.c_proj = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int = 768, heads: int = 12):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d)
        self.attn = CausalSelfAttention(d, heads)
        self.ln_2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.proj = nn.Linear(4 * d, d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    """GPT-2 small (124M): 12 layers, 768 wide, 12 heads, tied embeddings."""

    def __init__(self, vocab: int = 50257, ctx: int = 1024, d: int = 768, layers: int = 12, heads: int = 12):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(ctx, d)
        self.h = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


# ------------------------------------------------------------------ helpers


def bench_ms(fn) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, return_mode="median"))


def flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def variants(model):
    import pipec

    torch._dynamo.reset()
    return {
        "eager": model,
        "inductor": torch.compile(model),
        "inductor_ro": torch.compile(model, mode="reduce-overhead"),
        "pipec_launch": pipec.compile(model),
        "pipec_cudagraph": pipec.compile(model, mode="reduce-overhead"),
    }


def time_case(name: str, model, inputs, atol: float, rtol: float) -> dict:
    row = {"case": name}
    with torch.no_grad():
        expected = flat(model(*inputs))
        for label, fn in variants(model).items():
            start = time.perf_counter()
            for _ in range(3):  # compile, warm up, record graphs
                got = flat(fn(*inputs))
            torch.cuda.synchronize()
            row[f"{label}_first_s"] = round(time.perf_counter() - start, 2)
            for e, g in zip(expected, got):
                torch.testing.assert_close(g, e, atol=atol, rtol=rtol)
            row[label] = bench_ms(lambda fn=fn: fn(*inputs))
            print(f"  {name:6s} {label:16s} {row[label]:.4f} ms", flush=True)
    return row


def bitwise_launch_vs_cudagraph(model, inputs) -> dict:
    """Same inputs through pipec `launch` and `cudagraph` (autotune off: same configs)."""
    import pipec

    torch._dynamo.reset()
    with torch.no_grad():
        launch = pipec.compile(model, autotune=False)
        graph = pipec.compile(model, mode="reduce-overhead", autotune=False)
        results = []
        for _ in range(3):
            a, b = flat(launch(*inputs)), flat(graph(*inputs))
            results.append(all(torch.equal(x, y) for x, y in zip(a, b)))
    return {"bitwise_equal": all(results), "calls": len(results)}


def forced_capture_failure() -> dict:
    """A program whose host sync (aten.nonzero) really goes into a capture: the capture fails,
    the call falls back to `launch` with one warning, results stay right."""
    from pipec_ir import Buffer, CompileOptions, Program, Ref, Step, TensorType, make_attrs
    import sympy

    from pipec_runtime_cudagraph import cudagraph

    saved = cudagraph.HOST_SYNC_TARGETS
    cudagraph.HOST_SYNC_TARGETS = frozenset()  # do not refuse it up front: really try
    try:
        t = TensorType((sympy.Integer(64),), "float32")
        prog = Program(name="host_sync", inputs=(Buffer("x", t),), outputs=("y",),
                       buffers=(Buffer("y", TensorType((sympy.Integer(64),), "int64")),), kernels=(),
                       steps=(Step("extern", "aten.nonzero.default", ("x",), ("y",), make_attrs(args=(Ref("x"),))),))
        run = cudagraph.load_cudagraph(prog, CompileOptions(runtime="cudagraph"))
        ok = True
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(3):
                x = (torch.arange(64, device="cuda") % (i + 2) == 0).float()
                ok &= torch.equal(run([x])[0], torch.nonzero(x))
        torch.randn(2, device="cuda")  # CUDA (and its RNG) still usable
        messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    finally:
        cudagraph.HOST_SYNC_TARGETS = saved
    return {"correct": bool(ok), "warnings": len(messages), "warning": messages[:1],
            "fallback": run.fallback}


def peak_memory_block() -> dict:
    """max_memory_allocated of one call of a GPT-2 block (8 x 512 tokens), above what the
    weights and input take, for eager and pipec launch."""
    import pipec

    torch._dynamo.reset()
    torch.manual_seed(0)
    block = Block().cuda().eval()
    x = torch.randn(8, 512, 768, device="cuda")
    out = {}
    with torch.no_grad():
        variants = (("eager", block), ("pipec_launch", pipec.compile(block)),
                    # diagnostics: each GEMM alternative forced (what the timed choice trades off)
                    ("pipec_template", pipec.compile(block, choice="template")),
                    ("pipec_library", pipec.compile(block, choice="library")))
        for label, fn in variants:
            for _ in range(3):
                fn(x)
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            y = fn(x)
            torch.cuda.synchronize()
            out[label] = torch.cuda.max_memory_allocated() - base
            del y
    out["pipec_le_eager"] = out["pipec_launch"] <= out["eager"]
    from pipec_runtime_cudagraph.launch import ProgramRunner  # the plan's own estimate, for comparison

    import gc
    out["planned_peak_bytes"] = sorted(str(o.program.peak_bytes) for o in gc.get_objects()
                                       if type(o) is ProgramRunner)
    return out


# ------------------------------------------------------------------ main


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="runtime_overhead.json")
    parser.add_argument("--skip-gpt2", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("needs CUDA", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    import triton

    result["triton"] = triton.__version__
    torch.manual_seed(0)
    mlp = MLP8().cuda().eval()
    x = torch.randn(32, 64, device="cuda")
    rows = [time_case("mlp8", mlp, (x,), atol=1e-4, rtol=1e-4)]
    result["bitwise_mlp8"] = bitwise_launch_vs_cudagraph(mlp, (x,))
    if not args.skip_gpt2:
        torch.manual_seed(0)
        gpt = GPT2().cuda().eval()
        idx = torch.randint(0, 50257, (1, 128), device="cuda")
        rows.append(time_case("gpt2", gpt, (idx,), atol=1e-3, rtol=1e-3))
        result["bitwise_gpt2"] = bitwise_launch_vs_cudagraph(gpt, (idx,))
    result["rows"] = rows
    result["forced_capture_failure"] = forced_capture_failure()
    result["peak_memory_gpt2_block"] = peak_memory_block()
    targets = {"mlp8": {"pipec_launch": ("inductor", 0.252), "pipec_cudagraph": ("inductor_ro", 0.058)},
               "gpt2": {"pipec_cudagraph": ("inductor_ro", 0.93)}}
    result["targets_met"] = {
        f"{r['case']}:{k}": r[k] <= target for r in rows for k, (_, target) in targets[r["case"]].items()}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2, default=str)
    labels = ["eager", "inductor", "inductor_ro", "pipec_launch", "pipec_cudagraph"]
    print(f"\n{'case':8s}" + "".join(f"{label:>17s}" for label in labels) + "   (median ms, do_bench)")
    for r in rows:
        print(f"{r['case']:8s}" + "".join(f"{r[label]:17.4f}" if not math.isnan(r[label]) else f"{'-':>17s}"
                                          for label in labels))
    for key in ("bitwise_mlp8", "bitwise_gpt2", "forced_capture_failure", "peak_memory_gpt2_block",
                "targets_met"):
        if key in result:
            print(f"{key}: {result[key]}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

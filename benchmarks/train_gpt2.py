"""One GPT-2-small training step (forward, backward, AdamW) under bf16 autocast on CUDA:
eager vs torch.compile (Inductor, default mode) vs pipec, in one process.

    python benchmarks/train_gpt2.py --out $OUT/train_gpt2.json

Each backend trains its own copy of one initialized model on the same batch. The script
checks pipec's (and Inductor's) loss, gradients and the loss after one AdamW step against
eager at bf16 tolerances, then times a whole step with triton.testing.do_bench (median),
prints a table and writes JSON (exit code 1 when a check fails).

With --ddp the model runs under DistributedDataParallel on one GPU (NCCL, world size 1: the
bucketed gradient all-reduces are real NCCL calls on one rank), and each backend compiles the
whole DDP-wrapped model, as a DDP user does (`torch.compile(DDP(model))`): Dynamo's
DDPOptimizer splits the graph at the gradient buckets.

Compile time: without --ddp the model is compiled regionally. The embedding, one transformer block and
the head + loss are three compiled functions; the block function takes the block as an
argument, so Dynamo traces it once and all 12 blocks reuse that graph (parameters are graph
inputs). Both compilers get the same regions.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import math
import sys
import time
from dataclasses import asdict, dataclass

import torch
from policies import POLICIES, register_policies
from torch import nn
from torch.nn import functional as F

# bf16 loss and gradient tolerances vs eager (the loss is a float32 reduction of bf16 logits)
LOSS_RTOL = 2e-2
GRAD_REL_ERROR = 5e-2  # max over parameters of ||grad - eager grad|| / ||eager grad||


@dataclass(frozen=True)
class GPTConfig:
    vocab: int = 50257
    seq: int = 1024
    n_layer: int = 12
    n_head: int = 12
    d: int = 768


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.d, 3 * cfg.d)
        self.c_proj = nn.Linear(cfg.d, cfg.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.d)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.d)
        self.c_fc = nn.Linear(cfg.d, 4 * cfg.d)
        self.mlp_proj = nn.Linear(4 * cfg.d, cfg.d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    """GPT-2 (124M with the default config); the LM head is tied to the token embedding."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(cfg.vocab, cfg.d)
        self.wpe = nn.Embedding(cfg.seq, cfg.d)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d)
        self.lm_head = nn.Linear(cfg.d, cfg.vocab, bias=False)
        self.lm_head.weight = self.wte.weight
        for name, p in self.named_parameters():  # GPT-2's initialization
            if name.endswith("weight") and p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, std=std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)


# ---------------------------------------------------------------- the compiled regions


def embed(wte: nn.Embedding, wpe: nn.Embedding, idx: torch.Tensor) -> torch.Tensor:
    return wte(idx) + wpe(torch.arange(idx.size(1), device=idx.device))


def run_block(block: Block, x: torch.Tensor) -> torch.Tensor:
    return block(x)


def head_loss(ln_f: nn.LayerNorm, lm_head: nn.Linear, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = lm_head(ln_f(x))
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


@dataclass
class Regions:
    embed: object = embed
    block: object = run_block
    head: object = head_loss


def gpt_loss(model: GPT, regions: Regions, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    x = regions.embed(model.wte, model.wpe, idx)
    for block in model.blocks:
        x = regions.block(block, x)
    return regions.head(model.ln_f, model.lm_head, x, targets)


def compiled_regions(compiler) -> Regions:
    return Regions(embed=compiler(embed), block=compiler(run_block), head=compiler(head_loss))


class WholeLoss(nn.Module):
    """The loss as one module (what DDP wraps and --ddp's backends compile whole)."""

    def __init__(self, model: GPT) -> None:
        super().__init__()
        self.model = model

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return gpt_loss(self.model, Regions(), idx, targets)


def ddp_loss(model: GPT, compiler):
    """`compiler(DDP(WholeLoss(model)))` (compiler None: eager DDP)."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    wrapped = DDP(WholeLoss(model), device_ids=[torch.cuda.current_device()])
    return wrapped if compiler is None else compiler(wrapped)


def init_single_rank_nccl() -> None:
    import os

    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    dist.init_process_group("nccl", rank=0, world_size=1)


# ---------------------------------------------------------------- one backend


@dataclass
class Result:
    name: str
    compile_s: float = 0.0  # the first forward + backward (compilation included)
    loss: float = math.nan
    loss_after_step: float = math.nan
    median_ms: float = math.nan
    grad_rel_error: float | None = None  # vs eager
    kernels: int | None = None  # pipec: generated Triton kernels over all its graphs
    graphs: list | None = None  # pipec: (name, kind, kernel count) per graph


class Trainer:
    def __init__(self, name: str, model: GPT, regions: Regions, idx, targets, loss_fn=None) -> None:
        self.name, self.model, self.regions = name, model, regions
        self.idx, self.targets = idx, targets
        # the whole loss as one callable (--ddp), else the regions
        self.loss_fn = loss_fn if loss_fn is not None else functools.partial(gpt_loss, model, regions)
        self.opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1)

    def forward_backward(self) -> torch.Tensor:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = self.loss_fn(self.idx, self.targets)
        loss.backward()
        return loss.detach()

    def step(self) -> torch.Tensor:
        loss = self.forward_backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        return loss

    def grads(self) -> dict[str, torch.Tensor]:
        return {n: p.grad.detach().float().clone() for n, p in self.model.named_parameters() if p.grad is not None}


def grad_rel_error(grads: dict, reference: dict) -> float:
    worst = 0.0
    for name, ref in reference.items():
        got = grads.get(name)
        if got is None:
            return math.inf
        worst = max(worst, float((got - ref).norm() / ref.norm().clamp_min(1e-12)))
    return worst


def check_and_time(trainer: Trainer, reference: dict | None, args) -> tuple[Result, dict]:
    """First step (compile + numerics), second forward (after one AdamW step), then do_bench."""
    from triton.testing import do_bench

    result = Result(trainer.name)
    torch.cuda.synchronize()
    start = time.perf_counter()
    result.loss = float(trainer.forward_backward())
    torch.cuda.synchronize()
    result.compile_s = time.perf_counter() - start
    grads = trainer.grads()
    if reference is not None:
        result.grad_rel_error = grad_rel_error(grads, reference)
    trainer.opt.step()
    trainer.opt.zero_grad(set_to_none=True)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        result.loss_after_step = float(gpt_loss(trainer.model, Regions(), trainer.idx, trainer.targets))
    result.median_ms = do_bench(trainer.step, warmup=args.warmup_ms, rep=args.rep_ms, return_mode="median")
    print(f"  {trainer.name}: first step {result.compile_s:.1f} s, step {result.median_ms:.2f} ms", flush=True)
    return result, grads


def problems_vs_eager(result: Result, eager: Result) -> list[str]:
    out = []
    for what in ("loss", "loss_after_step"):
        got, want = getattr(result, what), getattr(eager, what)
        if not math.isfinite(got) or abs(got - want) > LOSS_RTOL * abs(want):
            out.append(f"{result.name}: {what} {got:.5f}, eager {want:.5f} (rtol {LOSS_RTOL})")
    if result.grad_rel_error is not None and not result.grad_rel_error <= GRAD_REL_ERROR:
        out.append(f"{result.name}: gradient relative error {result.grad_rel_error:.3g} > {GRAD_REL_ERROR}")
    return out


def pipec_stats(trainer: Trainer) -> tuple[int, list]:
    graphs = []
    regions = trainer.regions
    for fn in (trainer.loss_fn, regions.embed, regions.block, regions.head):
        session = getattr(fn, "pipec_session", None)
        for g in session.graphs if session is not None else ():
            graphs.append({"name": g.name, "kind": getattr(g, "kind", None), "kernels": g.kernel_count,
                           "ops": g.op_count, "externs": [t for t, _ in g.extern_ops]})
    return sum(g["kernels"] for g in graphs), graphs


# ---------------------------------------------------------------- main


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="where to write the JSON results")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--backends", default="eager,inductor,pipec",
                   help="comma-separated subset of eager,inductor,pipec (eager always runs: it is the reference)")
    p.add_argument("--warmup-ms", type=int, default=200)
    p.add_argument("--rep-ms", type=int, default=1000)
    p.add_argument("--pipec-fusion", default="default",
                   help="pipec's fusion policy (also policies.py's, e.g. default-stored)")
    p.add_argument("--ddp", action="store_true",
                   help="DistributedDataParallel at world size 1 (NCCL), each backend compiling the whole DDP model")
    p.add_argument("--autotune-configs", type=int, default=None,
                   help="pipec times only the first N launch configs per kernel (a faster compile)")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("train_gpt2.py needs a CUDA GPU (bf16 autocast, Triton kernels); none is visible", file=sys.stderr)
        return 2
    import pipec
    import triton

    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"eager", "inductor", "pipec"}
    if unknown:
        print(f"unknown backend(s): {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    cfg = GPTConfig(seq=args.seq, n_layer=args.layers)
    if args.ddp:
        init_single_rank_nccl()
    torch.manual_seed(0)
    base = GPT(cfg).cuda()
    g = torch.Generator(device="cuda").manual_seed(1)
    tokens = torch.randint(0, cfg.vocab, (args.batch, cfg.seq + 1), device="cuda", generator=g)
    idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    n_params = sum(p.numel() for p in base.parameters())
    print(f"GPT-2: {n_params / 1e6:.1f}M parameters, batch {args.batch} x seq {cfg.seq}, bf16 autocast, "
          f"{torch.cuda.get_device_name()}", flush=True)

    pipec_options = {} if args.autotune_configs is None else {"autotune_configs": args.autotune_configs}
    if args.pipec_fusion != "default":
        if args.pipec_fusion in POLICIES:
            register_policies()
        pipec_options["fusion"] = args.pipec_fusion
    compilers = {"eager": None, "inductor": torch.compile, "pipec": functools.partial(pipec.compile, **pipec_options)}
    results: dict[str, Result] = {}
    reference = None
    problems: list[str] = []
    for name in ["eager"] + [b for b in backends if b != "eager"]:
        model, compiler = copy.deepcopy(base), compilers[name]
        if args.ddp:
            trainer = Trainer(name, model, Regions(), idx, targets, loss_fn=ddp_loss(model, compiler))
        else:
            regions = Regions() if compiler is None else compiled_regions(compiler)
            trainer = Trainer(name, model, regions, idx, targets)
        try:
            result, grads = check_and_time(trainer, reference, args)
        except Exception as exc:  # one backend failing still reports the others
            problems.append(f"{name}: {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}")
            print(f"  {name}: FAILED ({problems[-1]})", flush=True)
            results[name] = Result(name)
            continue
        if name == "eager":
            reference = grads
        else:
            problems += problems_vs_eager(result, results["eager"])
        if name == "pipec":
            result.kernels, result.graphs = pipec_stats(trainer)
        results[name] = result
        del trainer, grads
        torch.cuda.empty_cache()

    eager_ms = results["eager"].median_ms
    print(f"\n{'backend':<10}{'step ms':>10}{'speedup':>9}{'first step s':>14}{'loss':>10}{'grad err':>10}")
    for r in results.values():
        speedup = eager_ms / r.median_ms if math.isfinite(r.median_ms) else math.nan
        err = "-" if r.grad_rel_error is None else f"{r.grad_rel_error:.2e}"
        print(f"{r.name:<10}{r.median_ms:>10.2f}{speedup:>8.2f}x{r.compile_s:>14.1f}{r.loss:>10.4f}{err:>10}")
    for p in problems:
        print(f"MISMATCH {p}")
    data = {
        "benchmark": "train_gpt2", "config": asdict(cfg), "batch": args.batch, "params": n_params,
        "pipec_options": pipec_options,
        "ddp": {"backend": "nccl", "world_size": 1, "compiled": "the whole DDP model"} if args.ddp else None,
        "dtype": "bfloat16 autocast", "device": torch.cuda.get_device_name(),
        "torch": torch.__version__, "triton": triton.__version__,
        "timing": "triton.testing.do_bench median of a whole step (forward, backward, AdamW)",
        "results": {k: asdict(v) for k, v in results.items()},
        "tolerances": {"loss_rtol": LOSS_RTOL, "grad_rel_error": GRAD_REL_ERROR},
        "problems": problems, "ok": not problems,
    }
    with open(args.out, "w") as f:
        json.dump(data, f, indent=2, default=str)
    print(f"results written to {args.out}")
    if args.ddp:
        import torch.distributed as dist

        dist.destroy_process_group()
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())

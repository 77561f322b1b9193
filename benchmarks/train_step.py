"""A training step, eager / Inductor / pipec in one process: cold first step, step time, GPU time,
peak memory, gradients against eager's, the heaviest kernels.

    python benchmarks/train_step.py --case bert --out $OUT/bert_train.json          # H200
    python benchmarks/train_step.py --case vocab_loss --out $OUT/loss.json
    python benchmarks/train_step.py --case gpt2 --out $OUT/gpt2_train.json
    python benchmarks/train_step.py --case bert --backends pipec --host-profile      # where pipec's host time goes
    python benchmarks/train_step.py --case bert --backends pipec --first-step-profile --isolate  # where the compile goes
    python benchmarks/train_step.py --case vit --out $OUT/vit_train.json            # also t5, resnet
    python benchmarks/train_step.py --case vocab_loss --device cpu --tiny --backends eager,pipec   # smoke test
    python benchmarks/train_step.py --case bert --backends pipec,inductor --isolate --out r.json  # a process each, cold and warm

Cases:
* `bert`: transformers' BertForMaskedLM at bert-base-uncased's config (random weights), 8 x 512
  tokens with a padding mask on every other row, masked-LM labels over the whole vocabulary, AMP
  bf16 (fp32 master weights, `torch.autocast`). `--tiny`: the suite's tiny config, 2 x 8, fp32.
* `gpt2`: transformers' GPT2LMHeadModel at gpt2's config (124M, random weights, `use_cache=False`),
  8 x 1024 tokens with its own LM loss over the 50257-word vocabulary (pipec pads the head to
  rows of 16-byte multiples), AMP bf16. `--tiny`: one layer of width 32, 2 x 8, fp32.
* `vit`, `t5`, `resnet`: the real-model suite's training models (tests/real_models/hf_models.py:
  ViTForImageClassification 32 x 224, T5ForConditionalGeneration 8 x 512 -> 128 tokens,
  ResNetForImageClassification (ResNet-50) 32 x 224) at their published configs, dropout off,
  AMP bf16; an image input takes a gradient too. `--tiny`: the suite's tiny configs, fp32.
* `vocab_loss`: BERT's masked-LM head alone: Linear(768, 30522) + cross entropy over 4096 rows
  under bf16 autocast, with a 768-wide input that takes a gradient (`--tiny`: 64 x 32 -> 500).

Backends: eager, inductor, pipec, and pipec-triton-launcher (pipec with `static_launch=False`:
every kernel through Triton's own launcher instead of torch's C++ one).

A step is: gradients set to None, forward under autocast (CUDA), backward. Each backend's model
starts from the same seed, so its gradients are compared with eager's (max absolute difference
over every parameter and the input; bf16 autocast: expect ~1e-2). Times (CUDA): the first step's
wall time with empty caches (the compile; pipec's compile-time profile of it in the JSON), then `--rounds` rounds of `--steps` steps each with
one synchronize per round, backends in rotated order (median and range); GPU time per step from
torch.profiler (the sum of kernel times: what the host does not hide); peak memory of one step
above the memory at rest. A step is often bound by the host's Python on the H200: compare the
wall time and the GPU time. Writes one JSON (--out) with every backend's row and top kernels.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from kernels import parse_option  # noqa: E402 - the benchmarks' shared KEY=VALUE parser


def build(case: str, tiny: bool, device: str, seed: int = 0, vocab: int | None = None):
    """(model, inputs dict, autocast dtype or None): the model returns the loss."""
    torch.manual_seed(seed)
    g = torch.Generator().manual_seed(seed + 1)
    if case in ("bert", "gpt2"):
        model, inputs = _hf_model(case, tiny, device, g)

        class Loss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.model = model

            def forward(self, **kw):
                return self.model(**kw).loss
        net = Loss()
    elif case == "vocab_loss":
        rows, hidden, columns = (64, 32, 500) if tiny else (4096, 768, 30522)
        vocab = vocab or columns

        class Loss(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.head = torch.nn.Linear(hidden, vocab)

            def forward(self, h, labels):
                return torch.nn.functional.cross_entropy(self.head(h), labels)
        net = Loss().to(device)
        inputs = {"h": torch.randn(rows, hidden, generator=g).requires_grad_(),
                  "labels": torch.randint(0, vocab, (rows,), generator=g)}
    elif case in suite_training_cases():
        net, inputs = _suite_model(case, tiny, device, seed)
    else:
        raise SystemExit(f"unknown case {case!r} (bert, gpt2, vocab_loss, {', '.join(suite_training_cases())})")
    inputs = {k: (v.detach().to(device).requires_grad_() if v.requires_grad else v.to(device)) for k, v in inputs.items()}
    autocast = torch.bfloat16 if device == "cuda" and not tiny else None
    return net, inputs, autocast


def _hf_model(case: str, tiny: bool, device: str, g: torch.Generator):
    """transformers' BertForMaskedLM (8 x 512, a padding mask on every other row) or
    GPT2LMHeadModel (8 x 1024, its LM loss: the head over 50257 words, which pipec pads) at the
    published base configs with random weights; (model, inputs)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if case == "bert":
        from transformers import BertConfig as Config, BertForMaskedLM as Model
        small = dict(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=32)
        cfg = Config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **(small if tiny else {}))
        batch, length = (2, 8) if tiny else (8, 512)
    else:
        from transformers import GPT2Config as Config, GPT2LMHeadModel as Model
        small = dict(vocab_size=129, n_embd=32, n_layer=1, n_head=2, n_positions=32, bos_token_id=0, eos_token_id=0)
        cfg = Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, **(small if tiny else {}))
        batch, length = (2, 8) if tiny else (8, 1024)
    model = Model(cfg).to(device).train()
    inputs = {"input_ids": torch.randint(0, cfg.vocab_size, (batch, length), generator=g),
              "labels": torch.randint(0, cfg.vocab_size, (batch, length), generator=g)}
    if case == "bert":
        mask = torch.ones(batch, length, dtype=torch.long)
        mask[1::2, length * 25 // 32:] = 0  # from token 400 of 512, as the session 9 runs
        inputs["attention_mask"] = mask
    return model, inputs


def suite_training_cases() -> tuple[str, ...]:
    """The real-model suite's other architectures with a training step (tests/real_models/hf_models.py)."""
    sys.path.insert(0, str(REPO / "tests" / "real_models"))
    from hf_models import TRAINING
    return tuple(name for name in TRAINING if name not in ("bert", "gpt2"))


def _suite_model(case: str, tiny: bool, device: str, seed: int):
    """The suite's training model of `case` (its head's loss) at its main real case's shape, or
    its tiny one; (a module taking the inputs by name, inputs)."""
    from hf_models import REAL, TINY, build_training

    built = build_training(case, device, seed, size=TINY if tiny else REAL)

    class Loss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = built.model

        def forward(self, **kw):
            return self.model(*(kw[name] for name in built.input_names))
    inputs = dict(zip(built.input_names, built.inputs))
    inputs = {k: (v.requires_grad_() if k == "pixel_values" else v) for k, v in inputs.items()}
    return Loss(), inputs


def compiled(backend: str, net, pipec_options: dict | None = None):
    if backend == "eager":
        return net
    if backend == "inductor":
        return torch.compile(net)
    if backend in ("pipec", "pipec-triton-launcher"):
        import pipec
        # pipec-triton-launcher: every kernel through Triton's own launcher (A/B of static_launch)
        return pipec.compile(net, **{"static_launch": backend == "pipec", **(pipec_options or {})})
    raise SystemExit(f"unknown backend {backend!r} (eager, inductor, pipec, pipec-triton-launcher)")


def make_step(fn, net, inputs: dict, autocast, device: str):
    grads_of = [p for p in net.parameters()] + [v for v in inputs.values() if v.requires_grad]

    def step():
        for t in grads_of:
            t.grad = None
        if autocast is not None:
            with torch.autocast(device, dtype=autocast):
                loss = fn(**inputs)
        else:
            loss = fn(**inputs)
        loss.backward()
        return loss
    return step, grads_of


def pipec_cuda_step(case: str = "bert"):
    """(step, session): `case`'s training step (real size, on the GPU) compiled by pipec, not run yet."""
    net, inputs, autocast = build(case, False, "cuda")
    net = net.cuda()
    fn = compiled("pipec", net)
    step, _ = make_step(fn, net, inputs, autocast, "cuda")
    return step, fn.pipec_session


def first_call_profile(session):
    """pipec's compile-time profile around the first step (a null context for other backends)."""
    if session is None:
        return contextlib.nullcontext()
    from pipec.profile import first_call
    return first_call(session.profile)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def gpu_time(step, steps: int) -> tuple[float, list]:
    """GPU ms per step and the kernels by time ([name, us per step, calls per step])."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    kernels = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", 0) or 0
        if t > 0:
            kernels.append([e.key[:100], round(t / steps, 1), e.count / steps])
    kernels.sort(key=lambda k: -k[1])
    return sum(k[1] for k in kernels) / 1e3, kernels


def step_copy_sites(step) -> list[dict]:
    """Where one step's ATen copies are called from (profile_kernels.py's `copy_sites`)."""
    from profile_kernels import copy_sites
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True, with_stack=True) as prof:
        step()
        torch.cuda.synchronize()
    return copy_sites(prof.events(), 1)


def host_profile(step, steps: int, top: int = 30) -> str:
    import cProfile

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(steps):
        step()
    torch.cuda.synchronize()
    profiler.disable()
    return profile_text(profiler, "tottime", top)


def profile_text(profiler, order: str, top: int) -> str:
    """The `top` functions of a cProfile run by `order` (tottime, cumulative), as pstats prints them."""
    import io
    import pstats

    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats(order).print_stats(top)
    return out.getvalue()


def main(argv=None) -> int:
    # no abbreviations: --isolate's children get this command line less --isolate, spelled out
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    ap.add_argument("--case", default="bert", choices=("bert", "gpt2", "vocab_loss") + suite_training_cases())
    ap.add_argument("--backends", default="eager,inductor,pipec")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="the small config (CPU smoke test)")
    ap.add_argument("--vocab", type=int, help="vocab_loss: the head's columns (30528: rows 16-byte aligned in bf16)")
    ap.add_argument("--pipec-option", action="append", default=[], metavar="KEY=VALUE",
                    help="a pipec.compile option for the pipec backends (persistent_reduction_bytes=65536)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10, help="steps per timed round")
    ap.add_argument("--host-profile", action="store_true", help="cProfile pipec's steps (CUDA)")
    ap.add_argument("--first-step-profile", action="store_true",
                    help="cProfile each backend's first step (the compile): the functions with the most "
                         "cumulative time in the JSON row (issue 21: where the first call's parts go)")
    ap.add_argument("--copies", action="store_true",
                    help="record where each backend's ATen copies are called from (CUDA; one step)")
    ap.add_argument("--out", help="results JSON")
    ap.add_argument("--isolate", action="store_true",
                    help="each backend in its own process with fresh pipec, Triton and Inductor caches (a "
                         "first step then pays the libraries' first use, cuBLAS and cuDNN plans, as a user's does; "
                         "in one process only the first backend does), then once more with the same caches: "
                         "the warm compile of a new process (rows BACKEND-warm); no gradient comparison")
    args = ap.parse_args(argv)
    if args.isolate:
        return isolated(args, argv if argv is not None else sys.argv[1:])
    backends = args.backends.split(",")
    cuda = args.device == "cuda"
    rows, steps, reference = {}, {}, None
    for backend in backends:  # compile (first step) and check each backend
        net, inputs, autocast = build(args.case, args.tiny, args.device, vocab=args.vocab)
        fn = compiled(backend, net, dict(parse_option(o) for o in args.pipec_option))
        step, grads_of = make_step(fn, net, inputs, autocast, args.device)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        sync(args.device)
        session = getattr(fn, "pipec_session", None)
        profiler = None
        if args.first_step_profile:
            import cProfile
            profiler = cProfile.Profile()
        start = time.perf_counter()
        with first_call_profile(session), profiler or contextlib.nullcontext():
            loss = step()
            sync(args.device)
        first = time.perf_counter() - start
        grads = [t.grad.detach().float().clone() for t in grads_of]
        row = {"first_step_s": round(first, 2), "loss": loss.item()}
        if session is not None:  # where pipec's first step went (README, "Compile-time profile")
            row["compile_profile"] = session.profile.to_dict()
        if profiler is not None:
            row["first_step_profile"] = profile_text(profiler, "cumulative", 60)
        if reference is None:
            reference = grads
        else:
            row["max_grad_error_vs_first"] = max((a - b).abs().max().item() for a, b in zip(grads, reference))
        if cuda:
            for _ in range(3):
                step()
            torch.cuda.synchronize()
            rest = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            step()
            torch.cuda.synchronize()
            row["peak_mib"] = round((torch.cuda.max_memory_allocated() - rest) / 2**20, 1)
            row["gpu_ms"], kernels = gpu_time(step, 5)
            row["gpu_ms"] = round(row["gpu_ms"], 3)
            row["kernels"] = kernels[:40]
            if args.host_profile and backend == "pipec":
                row["host_profile"] = host_profile(step, args.steps)
            if args.copies:
                row["copy_sites"] = step_copy_sites(step)
                for site in row["copy_sites"][:12]:
                    print(f"  {backend} copy x{site['calls']:<4g} {site['op']} {site['shapes'][:90]}")
                    for frame in site["stack"]:
                        print(f"      {frame[:120]}")
        rows[backend], steps[backend] = row, step
        print(f"{backend}: first step {row['first_step_s']} s, loss {row['loss']:.5f}"
              + (f", max grad error vs {backends[0]} {row['max_grad_error_vs_first']:.3g}" if "max_grad_error_vs_first" in row else "")
              + (f", GPU {row['gpu_ms']} ms/step, peak {row['peak_mib']} MiB" if cuda else ""), flush=True)
    walls = {b: [] for b in backends}
    for r in range(args.rounds):  # rotated order: each backend sees every position
        order = backends[r % len(backends):] + backends[:r % len(backends)]
        for backend in order:
            sync(args.device)
            start = time.perf_counter()
            for _ in range(args.steps):
                steps[backend]()
            sync(args.device)
            walls[backend].append((time.perf_counter() - start) * 1e3 / args.steps)
    for backend in backends:
        w = walls[backend]
        rows[backend]["step_ms"] = round(statistics.median(w), 3)
        rows[backend]["step_ms_range"] = [round(min(w), 3), round(max(w), 3)]
        print(f"{backend}: {rows[backend]['step_ms']} ms/step (rounds {rows[backend]['step_ms_range']})")
    if args.out:
        meta = {"case": args.case, "tiny": args.tiny, "vocab": args.vocab, "pipec_options": args.pipec_option, "device": args.device, "torch": torch.__version__,
                "gpu": torch.cuda.get_device_name() if cuda else None, "python": sys.version.split()[0]}
        Path(args.out).write_text(json.dumps({"meta": meta, "backends": rows}, indent=1))
    return 0


def isolated(args, argv: list[str]) -> int:
    """--isolate: this script once per backend and cache state, in a fresh process each."""
    import subprocess
    import tempfile

    from pipec.bench import CACHE_ENV  # pipec's compile cache, kernels and tuning, Inductor's, Triton's

    def without(flags: list[str], drop: dict[str, int]) -> list[str]:
        out, skip = [], 0
        for a in flags:
            if skip:
                skip -= 1
            elif a.split("=")[0] in drop:
                skip = drop[a.split("=")[0]] if "=" not in a else 0
            else:
                out.append(a)
        return out

    base = without(list(argv), {"--isolate": 0, "--out": 1, "--backends": 1})
    rows, meta = {}, None
    with tempfile.TemporaryDirectory(prefix="train_step_isolate_") as tmp:
        for backend in args.backends.split(","):
            caches = {env: str(Path(tmp) / backend / env) for env in CACHE_ENV}
            for run in ("", "-warm") if backend != "eager" else ("",):
                out = Path(tmp) / f"{backend}{run}.json"
                cmd = [sys.executable, __file__, *base, "--backends", backend, "--out", str(out)]
                print(f"== {backend}{run}: a new process" + (" with the caches just filled" if run else
                                                              ", empty caches"), flush=True)
                done = subprocess.run(cmd, env={**os.environ, **caches})
                if done.returncode != 0 or not out.exists():
                    rows[f"{backend}{run}"] = {"error": f"exit {done.returncode}"}
                    continue
                result = json.loads(out.read_text())
                meta = result["meta"]
                rows[f"{backend}{run}"] = result["backends"][backend]
    first = {k: r.get("first_step_s") for k, r in rows.items()}
    print("first steps, s (each in its own process): " + ", ".join(f"{k} {v}" for k, v in first.items()))
    if args.out:
        Path(args.out).write_text(json.dumps({"meta": {**(meta or {}), "isolated": True}, "backends": rows},
                                             indent=1))
    return 0 if all("error" not in r for r in rows.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

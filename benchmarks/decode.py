"""Greedy decoding through `model.generate`, as transformers users compile it: eager, Inductor and
pipec in one process, each checked against eager's tokens, then timed per decoding step.

    python benchmarks/decode.py --cases llama,qwen2,gpt2 --out $OUT/decode.json     # GPU, real sizes
    python benchmarks/decode.py --cases llama --tiny --device cpu --new-tokens 4    # CPU smoke test

How transformers compiles a decoder: with a static KV cache (`cache_implementation="static"`),
`generate` runs the prefill eagerly and every decoding step through `torch.compile(model.__call__,
**compile_config)`, by default Inductor under mode="reduce-overhead". A pipec user passes
`compile_config=CompileConfig(backend="pipec", mode=...)`; that is what the pipec rows do. Rows:
eager (no compile), inductor / pipec (mode default), inductor-ro / pipec-ro (reduce-overhead).

Per backend: one generate with scores kept, compared with eager's (tokens equal; otherwise the
first step where they part, and whether that step was a near tie: eager's two best scores closer
than twice the compiled scores' error there). Then rounds of
`--new-tokens` and of one new token, alternating, each synchronized; a decoding step's time is
(median long - median short) / (new tokens - 1), so the eager prefill is not in it. The compile:
the first generate's wall time minus eager's, for the default-mode rows (they run first; the RO
rows may reuse their caches). Models are the
suite's decoders (tests/real_models/hf_models.py) with random weights at their published configs,
in the dtype of the architecture's main real case (GPT-2: fp32; `--cases gpt2-4x1024-bf16` for
bf16); prompts of `--prompt` random tokens, `--batch` rows.

transformers (5.x) makes a new StaticCache for every `generate`: new tensors, marked static, so a
CUDA Graph backend (Inductor's trees, pipec's `cudagraph` runtime) records its decoding graph
again at each generate's first step, and the step time above includes that record spread over
the steps. `--reuse-cache` times generates that share one StaticCache (reset each time, passed as
`past_key_values`, as a server reusing its cache would): the steady state, with no record.
`--record-parts` gives that record's host time part by part (record_parts.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "real_models"))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # train_step (--profile)

BACKENDS = {  # row -> (torch.compile backend, mode); eager: no compile
    "eager": None,
    "inductor": ("inductor", "default"),
    "inductor-ro": ("inductor", "reduce-overhead"),
    "pipec": ("pipec", "default"),
    "pipec-ro": ("pipec", "reduce-overhead"),
}


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def settings(backend: str, new_tokens: int, device: str, scores: bool, cache=None) -> dict:
    """`generate`'s arguments for one row: greedy, a fixed number of new tokens, a static cache
    (`cache`: the caller's own StaticCache, reset here, instead of a new one per generate)."""
    from transformers import CompileConfig

    kw = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, pad_token_id=0,
              return_dict_in_generate=True, output_scores=scores)
    if cache is None:
        kw["cache_implementation"] = "static"
    else:
        cache.reset()
        kw["past_key_values"] = cache
    if BACKENDS[backend] is None:
        kw["disable_compile"] = True
    else:
        name, mode = BACKENDS[backend]
        config = CompileConfig(backend=name, mode=mode, fullgraph=False)
        config._compile_all_devices = device != "cuda"  # transformers compiles on CUDA only unless told
        kw["compile_config"] = config
    return kw


def _score_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference of two steps' scores; equal entries count 0 (a processor's -inf: the
    minimum length masks the end token's score)."""
    a, b = a.float(), b.float()
    return float(torch.where(a == b, 0.0, (a - b).abs()).max())


def compare(got, expected) -> dict:
    """Tokens against eager's; where they part, whether eager's choice there was a near tie."""
    equal = bool(torch.equal(got.sequences, expected.sequences))
    steps = len(expected.scores)
    errors = [_score_error(a, b) for a, b in zip(got.scores, expected.scores)]
    first = next((i for i, (a, b) in enumerate(zip(got.scores, expected.scores))
                  if not torch.equal(a.argmax(-1), b.argmax(-1))), None)
    row = {"tokens_equal": equal, "steps": steps, "max_score_error": _max(errors)}
    if first is not None:
        parted = got.scores[first].argmax(-1) != expected.scores[first].argmax(-1)  # the rows that chose otherwise
        top2 = expected.scores[first][parted].float().topk(2, dim=-1).values
        gap = float((top2[:, 0] - top2[:, 1]).max())
        error = errors[first]
        row.update(first_divergence=first, gap_there=gap, error_there=error, max_score_error=_max(errors[: first + 1]),
                   near_tie=math.isfinite(error) and gap <= 2 * error)
    return row


def _max(values: list[float]) -> float:
    """The largest value, NaN if any is (Python's max may skip one)."""
    return float(torch.tensor(values).max()) if values else 0.0


def _ours(w: warnings.WarningMessage) -> bool:
    """A warning of pipec's (its fallbacks, its runtimes': "cudagraph runtime: ...")."""
    text = str(w.message)
    return type(w.message).__name__.startswith("Pipec") or "pipec" in text or text.startswith("cudagraph runtime")


def _reset(model) -> None:
    torch._dynamo.reset()
    if hasattr(model, "_compiled_call"):  # generate's compiled __call__, cached across calls
        del model._compiled_call


def time_rounds(generate, device: str, rounds: int) -> tuple[float, float]:
    """Median wall ms of a long and of a one-token generate, rounds alternating."""
    long_ms, short_ms = [], []
    for _ in range(rounds):
        for which, out in (("long", long_ms), ("short", short_ms)):
            sync(device)
            start = time.perf_counter()
            generate(which)
            sync(device)
            out.append((time.perf_counter() - start) * 1e3)
    return statistics.median(long_ms), statistics.median(short_ms)


def kernel_profile(generate, new_tokens: int) -> dict:
    """--profile: GPU time of a decoding step (kernel time of a long generate minus a one-token
    one, over the steps between) and the long generate's heaviest kernels ([name, us, calls])."""
    from train_step import gpu_time  # torch.profiler's kernel sums

    long_gpu, kernels = gpu_time(lambda: generate("long"), 1)
    short_gpu, _ = gpu_time(lambda: generate("short"), 1)
    return {"step_gpu_ms": round((long_gpu - short_gpu) / (new_tokens - 1), 4), "kernels": kernels[:30]}


def run_backend(model, prompt, backend: str, args, expected, eager_wall: float | None) -> tuple[dict, object]:
    """One row: a checked generate against eager's (`expected`), then the timed rounds; (row, the checked output)."""
    from torch._dynamo.utils import counters

    _reset(model)
    counters.clear()
    row: dict = {"backend": backend}
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sync(args.device)
        start = time.perf_counter()
        checked = model.generate(prompt, **settings(backend, args.new_tokens, args.device, True))
        sync(args.device)
        row["first_generate_s"] = round(time.perf_counter() - start, 3)
        if expected is not None:
            row.update(compare(checked, expected))
            row["compile_s"] = round(row["first_generate_s"] - eager_wall, 3)
        lengths = {"long": args.new_tokens, "short": 1}
        cache = None
        if args.reuse_cache:  # one cache for every timed generate: its tensors stay where they are
            from transformers import StaticCache

            # the length transformers gives its own (the last new token is never fed back): one graph
            cache = StaticCache(config=model.config, max_cache_len=prompt.shape[1] + args.new_tokens - 1)

        def generate(which):
            return model.generate(prompt, **settings(backend, lengths[which], args.device, False, cache))

        generate("long")  # warm: CUDA Graph recording of the decoding step, the one-token path
        generate("short")
        long_ms, short_ms = time_rounds(generate, args.device, args.rounds)
        if args.profile:
            row.update(kernel_profile(generate, args.new_tokens))
        if args.host_profile:  # where a long generate's host time goes (a record's parts, if it records)
            from train_step import host_profile

            row["host_profile"] = host_profile(lambda: generate("long"), 1, top=40)
        if args.record_parts:  # the host time of a record's parts, per long generate (record_parts.py)
            from record_parts import line, record_parts

            row["record_parts"] = record_parts(lambda: generate("long"))
            print(f"{backend:12} parts: {line(row['record_parts'])}", flush=True)
            # as in the timed rounds: each long generate after a one-token one (whose new cache
            # may take the memory, so the long one's cache lands elsewhere)
            row["record_parts_alternating"] = record_parts(lambda: generate("long"), before=lambda: generate("short"))
            print(f"{backend:12} parts after a one-token generate: {line(row['record_parts_alternating'])}", flush=True)
    step = (long_ms - short_ms) / (args.new_tokens - 1)
    if step <= 0:  # the long generate no slower than the one-token one: noise swamped the steps
        row["note"] = f"no step time: {long_ms:.3f} ms for {args.new_tokens} tokens against {short_ms:.3f} for one"
    row.update(generate_ms=round(long_ms, 3), prefill_ms=round(short_ms, 3), step_ms=round(step, 4) if step > 0 else None,
               graphs=counters["stats"].get("unique_graphs", 0),
               warnings=sorted({str(w.message)[:240] for w in caught if _ours(w)}))
    return row, checked


def run_case(case: str, args) -> dict:
    import hf_models

    size = hf_models.TINY if args.tiny else hf_models.REAL
    model = hf_models.causal_lm(case, size, device=args.device)
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(3, model.config.vocab_size, (args.batch, args.prompt), generator=g).to(args.device)
    record = {"case": case, "size": size, "reuse_cache": args.reuse_cache, "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
              "batch": args.batch, "prompt": args.prompt, "new_tokens": args.new_tokens, "rows": {}}
    expected, eager_wall = None, None
    for backend in args.backends:
        try:
            row, out = run_backend(model, prompt, backend, args, expected, eager_wall)
        except Exception as exc:  # a backend's failure is its row; the others still run
            row = {"backend": backend, "error": f"{type(exc).__name__}: {str(exc)[:300]}",
                   "where": traceback.format_exc().splitlines()[-4:]}
            out = None
        if backend == "eager" and out is not None:
            expected, eager_wall = out, row["first_generate_s"]
        record["rows"][backend] = row
        print(f"{case:18} {backend:12} {_line(row)}", flush=True)
    eager = record["rows"].get("eager", {}).get("step_ms")
    for row in record["rows"].values():
        if eager and row.get("step_ms"):
            row["speedup_vs_eager"] = round(eager / row["step_ms"], 3)
    for mode in ("", "-ro"):
        pipec, inductor = record["rows"].get("pipec" + mode, {}), record["rows"].get("inductor" + mode, {})
        if pipec.get("step_ms") and inductor.get("step_ms"):
            record["pipec_vs_inductor" + mode.replace("-", "_")] = round(inductor["step_ms"] / pipec["step_ms"], 3)
    return record


def _line(row: dict) -> str:
    if "error" in row:
        return f"error: {row['error'][:160]}"
    check = "" if "tokens_equal" not in row else (
        "tokens = eager" if row["tokens_equal"] else
        f"tokens part at step {row['first_divergence']} ({'near tie' if row['near_tie'] else 'NOT a tie'})")
    gpu = f" (GPU {row['step_gpu_ms']:.3f} ms)" if "step_gpu_ms" in row else ""
    step = f"{row['step_ms']:.3f} ms" if row["step_ms"] else f"- ({row['note']})"
    return (f"step {step}{gpu}, generate {row['generate_ms']:.1f} ms, prefill+1 {row['prefill_ms']:.1f} ms, "
            f"first {row['first_generate_s']:.1f} s, graphs {row['graphs']}  {check}")


def _cell(text: str) -> str:
    """`text` as one markdown table cell."""
    return " ".join(str(text).replace("|", "/").split())


def markdown(records: list[dict], meta: dict) -> str:
    cache = ("one StaticCache shared by every timed generate (--reuse-cache)" if meta["args"]["reuse_cache"]
             else "a new StaticCache per generate, as transformers makes (a CUDA Graph record per generate included)")
    lines = [f"# Greedy decoding through generate ({meta['device_name']}, torch {meta['torch']})", "",
             f"Cache: {cache}.", "",
             "ms per decoding step (static cache; the eager prefill excluded); ratio: Inductor's step / pipec's in "
             "the same mode (> 1: pipec faster); compile: the default-mode row's first generate minus eager's (the "
             "RO rows follow it and may reuse its caches).", "",
             "| case | dtype | batch x prompt + new | eager | Inductor | pipec | pipec / Inductor | Inductor RO | "
             "pipec RO | RO ratio | compile s pipec / Inductor | tokens vs eager |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ms(r, k):
        v = r["rows"].get(k, {}).get("step_ms")
        return f"{v:.3f}" if v else _cell(r["rows"].get(k, {}).get("error", "-")[:40])

    for r in records:
        if "error" in r:
            lines.append(f"| {r['case']} | | | {_cell(r['error'][:80])} | | | | | | | | |")
            continue
        rows = r["rows"]
        checks = ", ".join(f"{k}: {'equal' if v.get('tokens_equal') else ('near tie' if v.get('near_tie') else 'DIFFER')}"
                           for k, v in rows.items() if k != "eager" and "tokens_equal" in v)
        comp = " / ".join(str(rows.get(k, {}).get("compile_s", "-")) for k in ("pipec", "inductor"))
        lines.append(f"| {r['case']} | {r['dtype']} | {r['batch']} x {r['prompt']} + {r['new_tokens']} | {ms(r, 'eager')} | "
                     f"{ms(r, 'inductor')} | {ms(r, 'pipec')} | {r.get('pipec_vs_inductor', '-')} | {ms(r, 'inductor-ro')} | "
                     f"{ms(r, 'pipec-ro')} | {r.get('pipec_vs_inductor_ro', '-')} | {comp} | {checks} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="llama,qwen2,gpt2", help="decoder cases of the suite (comma-separated)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help=f"rows, eager first (of: {', '.join(BACKENDS)})")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--tiny", action="store_true", help="the suite's tiny configs (CPU smoke test)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, help="prompt tokens (default 32; --tiny: 8, the tiny configs know 32 positions)")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reuse-cache", action="store_true",
                    help="time generates that share one StaticCache (reset each time) instead of transformers' "
                         "new cache per generate, whose new tensors cost CUDA Graph backends a record each")
    ap.add_argument("--profile", action="store_true",
                    help="CUDA: each row's GPU time per step and its heaviest kernels (with --reuse-cache, no CUDA Graph "
                         "record's warm-up run in them)")
    ap.add_argument("--host-profile", action="store_true",
                    help="CUDA: cProfile one long generate per row (top 40 functions by own time, in the JSON)")
    ap.add_argument("--record-parts", action="store_true",
                    help="CUDA: host time of each CUDA Graph part (pipec's general-path call, record, replay build; "
                         "torch's replay and capture_end) over three long generates per row, back to back and "
                         "each after a one-token generate (record_parts.py)")
    ap.add_argument("--out", help="results JSON (and the same path with .md)")
    args = ap.parse_args(argv)
    args.prompt = args.prompt or (8 if args.tiny else 32)
    args.backends = [b for b in args.backends.split(",") if b]
    unknown = sorted(set(args.backends) - set(BACKENDS))
    if unknown or not args.backends or args.backends[0] != "eager":
        ap.error(f"--backends: eager first, then any of {', '.join(BACKENDS)} (unknown: {', '.join(unknown) or 'none'})")
    if (args.profile or args.host_profile or args.record_parts) and args.device != "cuda":
        ap.error("--profile, --host-profile and --record-parts time CUDA work: they need --device cuda")
    if args.new_tokens < 2:
        ap.error("--new-tokens must be at least 2 (a step's time is the difference from one new token)")
    meta = {"device_name": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
            "torch": torch.__version__, "args": {k: v for k, v in vars(args).items()}}
    records = []
    for case in [c for c in args.cases.split(",") if c]:
        try:
            records.append(run_case(case, args))
        except Exception as exc:  # an unknown case or a model that cannot be built: its record says so
            records.append({"case": case, "error": f"{type(exc).__name__}: {str(exc)[:300]}"})
            print(f"{case}: {records[-1]['error']}", flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps({"meta": meta, "cases": records}, indent=1))
            Path(args.out).with_suffix(".md").write_text(markdown(records, meta))
    print(markdown(records, meta))
    return 0 if all("error" not in r and all("error" not in row for row in r["rows"].values()) for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())

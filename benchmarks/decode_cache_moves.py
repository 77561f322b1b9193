"""Does a decoder's static cache come back to the same addresses at every `generate`?

transformers makes a new StaticCache (tensors marked static) for each `generate`. A CUDA Graph
backend whose graph pins the last cache's addresses replays the next generate's steps only if
the new cache lands there; else it records again (pipec's `cudagraph` runtime, Inductor's CUDA
Graph trees alike). Where it lands is the caching allocator's choice, made from what the process
allocated and freed in between: a backend that allocates in the caller's memory at a record
can move the next cache. Session 52 on an H100 (this tool's prototype): Llama-1B's cache came back
to all 48 of its addresses at every generate under Inductor, and to almost none under pipec.

Per generate (long ones of 64 new tokens, one-token ones between some, as `decode.py` times
them): host ms, the cache's addresses that are the last generate's, pipec's general-path calls
and records, and the live allocations of the caller's memory pool after it. With `--who` (CUDA
only), the allocator's history is recorded and, for each moved address, the first allocation
made over it since the last generate ended is printed with its Python stack: what took the spot.

    python benchmarks/decode_cache_moves.py --case llama --backend pipec-ro   # one backend a process
    python benchmarks/decode_cache_moves.py --case gpt2 --backend pipec-ro --who
    python benchmarks/decode_cache_moves.py --case llama --backend eager --tiny  # CPU smoke test
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "real_models"))
import decode  # noqa: E402
import hf_models  # noqa: E402
from record_parts import timed_parts  # noqa: E402

SEQUENCE = ("long", "long", "long", "short", "long", "short", "long", "long")


def cache_addresses(cache) -> list[int]:
    """The (keys, values, length) addresses of each layer of a StaticCache."""
    return [p for layer in cache.layers
            for p in (layer.keys.data_ptr(), layer.values.data_ptr(), layer.cumulative_length.data_ptr())]


def pipec_targets() -> list:
    """record_parts.py's targets for the `cudagraph` runtime's general-path calls and records."""
    try:
        from pipec_runtime_cudagraph.cudagraph import CudaGraphProgram
    except ImportError:
        return []
    return [(CudaGraphProgram, "_call", "general_calls"), (CudaGraphProgram, "_record", "records")]


def first_allocation_over(address: int, events: list[dict]) -> dict | None:
    """The first `alloc` of the allocator's history `events` whose block covers `address`."""
    return next((e for e in events if e["action"] == "alloc" and e["addr"] <= address < e["addr"] + e["size"]), None)


def stack(event: dict, depth: int = 6) -> str:
    """An allocation's Python frames, innermost first, without torch.nn's call plumbing."""
    frames = [f for f in event.get("frames", ())
              if "torch/nn/modules/module.py" not in f["filename"] and not f["filename"].startswith("<")]
    return " <- ".join(f"{Path(f['filename']).parent.name}/{Path(f['filename']).name}:{f['line']}:{f['name']}"
                       for f in frames[:depth])


def allocator_history() -> list[dict]:
    """The caching allocator's recorded events on the current device (`--who`)."""
    traces = torch.cuda.memory._snapshot()["device_traces"]
    return traces[torch.cuda.current_device()] if traces else []


def who_took(last: list[int], now: list[int], events: list[dict], shown: int = 6) -> list[str]:
    """For the first `shown` moved cache addresses: the allocation that first covered the old one."""
    lines = []
    for j, (old, new) in enumerate((a, b) for a, b in zip(last, now) if a != b):
        if j == shown:
            break
        hit = first_allocation_over(old, events)
        lines.append(f"  moved {old:#x} -> {new:#x}: " + ("nothing allocated over it" if hit is None else
                     f"first covered by {hit['size']} B at {hit['addr']:#x} (stream {hit['stream']}): {stack(hit)}"))
    return lines


def callers_live_allocations() -> int | None:
    """Live blocks of the caller's own memory pool (not CUDA Graph pools), or None without CUDA."""
    if not torch.cuda.is_available():
        return None
    return sum(1 for segment in torch.cuda.memory_snapshot()
               if tuple(segment.get("segment_pool_id", (0, 0))) == (0, 0)
               for block in segment["blocks"] if block["state"] == "active_allocated")


def main(argv: list[str] | None = None) -> list[dict]:
    """Run the generates; their rows."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", default="llama")
    parser.add_argument("--backend", default="pipec-ro", choices=sorted(decode.BACKENDS))
    parser.add_argument("--tiny", action="store_true", help="the suite's tiny config (CPU smoke test)")
    parser.add_argument("--who", action="store_true", help="what took each moved address (CUDA only)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    device = "cpu" if args.tiny else "cuda"
    if args.who and (args.tiny or not torch.cuda.is_available()):
        parser.error("--who reads the CUDA caching allocator's history: it needs a GPU and the real-size model")
    if args.who:
        torch.cuda.memory._record_memory_history(max_entries=2_000_000, stacks="python")
    model = hf_models.causal_lm(args.case, hf_models.TINY if args.tiny else hf_models.REAL, device=device)
    prompt = torch.randint(3, model.config.vocab_size, (1, 8 if args.tiny else 32),
                           generator=torch.Generator().manual_seed(1)).to(device)
    lengths = {"long": 4 if args.tiny else 64, "short": 1}
    rows, last, mark = [], [], 0
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, which in enumerate(SEQUENCE):
            events: list = []
            decode.sync(device)
            start = time.perf_counter()
            with timed_parts(events, pipec_targets()):
                out = model.generate(prompt, **decode.settings(args.backend, lengths[which], device, False))
            decode.sync(device)
            ms = 1e3 * (time.perf_counter() - start)
            addresses = cache_addresses(out.past_key_values)
            del out  # the cache must be free before the next generate, as a user's would be
            counts = {name: sum(1 for n, _ in events if n == name) for name in ("general_calls", "records")}
            row = dict(generate=i, kind=which, ms=round(ms, 1), cache_addresses=len(addresses),
                       same_as_last=sum(a == b for a, b in zip(addresses, last)), **counts,
                       callers_live_allocations=callers_live_allocations())
            rows.append(row)
            print(" ".join(f"{k} {v}" for k, v in row.items()), flush=True)
            if args.who:  # the history since the last generate's cache was freed; this one's is freed now
                history = allocator_history()
                print("\n".join(who_took(last, addresses, history[mark:])), flush=True)
                mark = len(history)
            last = addresses
    if args.out:
        args.out.write_text(json.dumps(dict(case=args.case, backend=args.backend, device=device, rows=rows), indent=1))
    return rows


if __name__ == "__main__":
    main()

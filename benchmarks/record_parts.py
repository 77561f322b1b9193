"""Host time of a CUDA Graph backend's parts, per call of a workload (`decode.py --record-parts`).

Under reduce-overhead, transformers' `generate` costs a CUDA Graph record per call (a new static
cache each time), and that record's host time is what separates backends whose replays cost the
same GPU time. This wraps, for the duration of a `with`, torch's `CUDAGraph.replay`,
`capture_begin` and `capture_end` and what `torch.cuda.graph` runs on entry (`synchronize`,
`empty_cache`, `gc.collect`), for both backends, and pipec's `cudagraph` runtime's general-path
call, record (its warm-up runs and captured run) and replay-function build, and sums their host
time per call of the workload. The parts nest: a record happens inside a general-path call,
the rest inside a record. pipec's replay functions bind `CUDAGraph.replay` when they are built,
so only the replays of a function built inside the `with` are counted: a call that records
nothing shows no replays (GPT-2's back-to-back generates in session 51).
"""

from __future__ import annotations

import contextlib
import gc
import statistics
import time

import torch

PIPEC_PARTS = (("_call", "general_call"), ("_record_graph", "record"), ("_build_replay", "build_replay"))
# inside a record: the warm-ups (the runner's own call) and the captured specialized run
RUNNER_PARTS = (("__call__", "warmup_run"), ("run_specialized", "capture_run"))
TORCH_PARTS = (("replay", "replay"), ("capture_begin", "capture_begin"), ("capture_end", "capture_end"))
# what `torch.cuda.graph` does on entry (both backends capture through it)
MODULE_PARTS = ((torch.cuda, "synchronize", "synchronize"), (torch.cuda, "empty_cache", "empty_cache"),
                (gc, "collect", "gc_collect"))


def _targets() -> list[tuple[object, str, str]]:
    targets = [(torch.cuda.CUDAGraph, attr, name) for attr, name in TORCH_PARTS] + list(MODULE_PARTS)
    try:
        from pipec_runtime_cudagraph.cudagraph import CudaGraphProgram
        from pipec_runtime_cudagraph.runner import ProgramRunner
    except ImportError:  # pipec not installed: torch's parts only
        return targets
    return (targets + [(CudaGraphProgram, attr, name) for attr, name in PIPEC_PARTS]
            + [(ProgramRunner, attr, name) for attr, name in RUNNER_PARTS])


@contextlib.contextmanager
def timed_parts(events: list, targets: list[tuple[object, str, str]] | None = None):
    """Inside the `with`, every call of each (class or module, function, name) target appends
    (name, host seconds) to `events`; the functions are restored after."""
    restore = []
    try:
        for owner, attr, name in _targets() if targets is None else targets:
            original = getattr(owner, attr)
            restore.append((owner, attr, owner.__dict__.get(attr)))

            def timed(*args, _original=original, _name=name, **kwargs):
                start = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    events.append((_name, time.perf_counter() - start))

            setattr(owner, attr, timed)
        yield events
    finally:
        for owner, attr, own in reversed(restore):
            if own is None:
                delattr(owner, attr)  # it was inherited: the base's again
            else:
                setattr(owner, attr, own)


def summarize(events: list[tuple[str, float]], wall_s: float) -> dict:
    """One call's parts: calls and host ms per part; the replays' first and median host us."""
    parts: dict[str, dict] = {}
    for name, seconds in events:
        part = parts.setdefault(name, {"calls": 0, "ms": 0.0})
        part["calls"] += 1
        part["ms"] += seconds * 1e3
    for part in parts.values():
        part["ms"] = round(part["ms"], 3)
    replays = [s for name, s in events if name == "replay"]
    out = {"wall_ms": round(wall_s * 1e3, 3), "parts": parts}
    if replays:
        out.update(replay_first_us=round(replays[0] * 1e6, 1), replay_median_us=round(statistics.median(replays) * 1e6, 1))
    return out


def record_parts(call, calls: int = 3, before=None) -> list[dict]:
    """`summarize` of each of `calls` synchronized calls of `call()` (CUDA); `before()`, if
    given, runs ahead of each, untimed (decode.py: a one-token generate, as its timed rounds
    alternate them)."""
    out = []
    for _ in range(calls):
        if before is not None:
            before()
        events: list = []
        torch.cuda.synchronize()  # outside the `with`: only the call's own synchronizations count
        start = time.perf_counter()
        with timed_parts(events):
            call()
        torch.cuda.synchronize()
        wall = time.perf_counter() - start
        out.append(summarize(events, wall))
    return out


def line(parts: list[dict]) -> str:
    """The calls' parts on one line: wall, then each part's ms per call (median over calls)."""
    names = sorted({n for p in parts for n in p["parts"]})
    cells = [f"wall {statistics.median(p['wall_ms'] for p in parts):.1f} ms"]
    for n in names:
        ms = statistics.median(p["parts"].get(n, {}).get("ms", 0.0) for p in parts)
        calls = statistics.median(p["parts"].get(n, {}).get("calls", 0) for p in parts)
        cells.append(f"{n} {ms:.2f} ms/{calls:g}")
    return ", ".join(cells)


__all__ = ["line", "record_parts", "summarize", "timed_parts"]

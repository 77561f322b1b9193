"""Timing runs on the GPU clock from CUDA Graphs captured once (a choice group's alternatives).

A choice group's alternatives are timed in rounds (rounds.py). Triton's `do_bench_cudagraph`
captured a new graph at every call: it ran the alternative `rep / estimate` times in Python
under capture (up to a few hundred calls of its steps), instantiated the graph, and replayed
it ten times for 5 ms each. Four rounds made that four captures and 40 replays per
alternative, 0.1 s or more: ConvNeXt-tiny's reduce-overhead compile spent 8.6 of its 10.3 s
timing 21 groups of 78 alternatives (H100, docs/performance.md, "Session 34").

`GraphBench` captures each run once, at its first timing, and each later round replays that
graph `REPLAYS` times, the round's time being their median. A group's graphs live until
`close`; every capture runs on the bench's own stream with the cuBLAS workspaces cleared
before and after, so each graph allocates its own workspace in its own pool, and `close`
clears them again: PyTorch caches one workspace per (handle, stream) for good, and Triton's
timer, warming up on a new stream each call, had left about 1 GiB of them after SD 1.5's
first call.
"""

from __future__ import annotations

import torch

from .capture_support import clear_cublas_workspaces

REP_MS = 5.0  # GPU time one replay covers (the graph unrolls the run that many ms' worth)
REPLAYS = 3  # replays per round; the round's time is their median
MAX_UNROLL = 1000  # runs per graph at most (a run of no measurable time)


class GraphBench:
    """`bench(run) -> ms per run` on the GPU clock (rounds.py's `bench`); `close()` when done."""

    def __init__(self, rep_ms: float = REP_MS, replays: int = REPLAYS):
        self.rep_ms, self.replays = rep_ms, replays
        self.graphs: dict = {}  # run -> (its graph, runs unrolled in it)
        self.stream = None

    def __call__(self, run) -> float:
        entry = self.graphs.get(run)
        if entry is None:
            entry = self.graphs[run] = self._capture(run)
        graph, unrolled = entry
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for _ in range(self.replays):
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / unrolled)
        return sorted(times)[len(times) // 2]

    def _capture(self, run) -> tuple:
        if self.stream is None:
            self.stream = torch.cuda.Stream()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            run()  # on this stream once before capture (its first call may allocate)
            start.record()
            for _ in range(5):  # how long one run takes, to unroll REP_MS of them
                run()
            end.record()
        end.synchronize()
        estimate = start.elapsed_time(end) / 5
        unrolled = MAX_UNROLL if estimate <= 0 else max(1, min(MAX_UNROLL, int(self.rep_ms / estimate)))
        graph = torch.cuda.CUDAGraph()
        clear_cublas_workspaces()  # the capture allocates its own workspace, in its own pool
        try:
            with torch.cuda.graph(graph, stream=self.stream):
                for _ in range(unrolled):
                    run()
        except Exception:
            torch.cuda.synchronize()  # let the failed capture's work finish before anything else
            raise
        finally:
            clear_cublas_workspaces()  # no later capture borrows it
        torch.cuda.current_stream().wait_stream(self.stream)
        return graph, unrolled

    def close(self) -> None:
        """Drop the graphs (and their pools) and the workspaces they cached."""
        if self.graphs:
            torch.cuda.synchronize()
        self.graphs.clear()
        clear_cublas_workspaces()


__all__ = ["GraphBench"]

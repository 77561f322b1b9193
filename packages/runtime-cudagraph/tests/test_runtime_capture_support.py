"""Where a key's first record warms up (capture_support.pool_held, CudaGraphProgram._warm_up), on
the CPU: the caching allocator's pool hooks are replaced by a model of their reference counts that
refuses what the allocator refuses, and the streams by stand-ins that log the order of events."""

from __future__ import annotations

import contextlib

import pytest
import torch
from runtime_helpers import add_program

from pipec_ir import CompileOptions
from pipec_runtime_cudagraph import capture_support
from pipec_runtime_cudagraph.capture_support import pool_held
from pipec_runtime_cudagraph.cudagraph import CudaGraphProgram


class FakeAllocator:
    """The pool hooks' bookkeeping: begin takes a reference (making the pool if new) and routes
    this thread's allocations to it, end stops routing, release drops the reference. Like the
    allocator, it refuses to begin in a pool whose references all went (a capture would too)."""

    def __init__(self):
        self.uses: dict = {}
        self.routing: list = []
        self.log: list = []

    def begin(self, device, pool):
        if pool in self.uses:
            assert self.uses[pool] > 0, "the allocator asserts: a pool with no reference left"
        self.uses[pool] = self.uses.get(pool, 0) + 1
        self.routing.append(pool)
        self.log.append("begin")

    def end(self, device, pool):
        self.routing.remove(pool)
        self.log.append("end")

    def release(self, device, pool):
        self.uses[pool] -= 1
        assert self.uses[pool] >= 0
        self.log.append("release")


@pytest.fixture()
def allocator(monkeypatch):
    fake = FakeAllocator()
    monkeypatch.setattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", fake.begin, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_endAllocateToPool", fake.end, raising=False)
    monkeypatch.setattr(torch._C, "_cuda_releasePool", fake.release, raising=False)
    return fake


def test_the_pool_stays_referenced_from_the_warm_up_to_the_capture(allocator):
    pool, device = (0, 7), torch.device("cuda", 0)
    with pool_held(device, pool) as route:
        assert allocator.uses[pool] == 1 and allocator.routing == []  # referenced, routing nothing
        with route():
            assert allocator.routing == [pool]
        assert allocator.routing == [] and allocator.uses[pool] == 1  # still held after the warm-up
        allocator.begin(0, pool)  # what capture_begin does: allowed, the pool has a reference
        allocator.end(0, pool)
    assert allocator.uses[pool] == 1  # the capture's reference alone (the graph's)
    assert allocator.log == ["begin", "end", "begin", "end", "release", "begin", "end", "release"]


def test_a_failing_warm_up_stops_routing_and_drops_its_references(allocator):
    pool = (0, 8)
    with pytest.raises(RuntimeError, match="kernel failed"):
        with pool_held(torch.device("cuda", 0), pool) as route, route():
            raise RuntimeError("kernel failed")
    assert allocator.routing == [] and allocator.uses[pool] == 0


def test_without_the_hooks_route_routes_nothing(monkeypatch):
    monkeypatch.setattr(capture_support, "_pool_hooks", lambda: None)
    with pool_held(torch.device("cuda", 0), (0, 9)) as route, route():
        pass


class FakeStream:
    def __init__(self, name: str, log: list):
        self.name, self.log = name, log

    def wait_stream(self, other):
        self.log.append(f"{self.name} waits for {other.name}")


def test_the_first_warm_up_runs_on_the_callers_stream_and_the_last_in_the_graphs_pool(monkeypatch):
    """The first warm-up compiles and tunes: on pipec's stream its temporaries were cached for that
    stream alone, held memory the caller could never reuse. Only the last runs on the capture
    stream, allocating from the graph's pool, which its capture reuses."""
    log: list = []
    caller, capturing = FakeStream("caller", log), FakeStream("capture", log)
    current = [caller]

    @contextlib.contextmanager
    def on(stream):
        current.append(stream)
        try:
            yield
        finally:
            current.pop()

    monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: current[-1])
    monkeypatch.setattr(torch.cuda, "stream", on)
    routing = []

    @contextlib.contextmanager
    def route():
        routing.append(True)
        try:
            yield
        finally:
            routing.pop()

    prog = CudaGraphProgram(add_program(8), CompileOptions(runtime="cudagraph"))
    monkeypatch.setattr(type(prog.runner), "__call__",
                        lambda self, inputs: log.append(f"run on {current[-1].name}, routed {bool(routing)}"))
    x = torch.randn(8)
    prog._warm_up([x, x], [], (), capturing, route, warmups=2)
    assert log == ["run on caller, routed False", "capture waits for caller",
                   "run on capture, routed True", "caller waits for capture"]
    log.clear()
    prog._warm_up([x, x], [], (), capturing, route, warmups=1)  # a retry: the one run is the last
    assert log == ["capture waits for caller", "run on capture, routed True", "caller waits for capture"]

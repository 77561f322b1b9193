"""Writes to inputs (Program.writes, IR 1.7): after a call each written input holds its value,
whether the launch stored it there (`inplace` naming the input) or the runtime copies it, on the
general path, the specialized path and the `cudagraph` runtime's (simulated) replays."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from pipec_ir import CompileOptions, Step, make_attrs
from runtime_helpers import add_program

from pipec_runtime_cudagraph import cudagraph
from pipec_runtime_cudagraph.launch import ProgramRunner
from test_runtime_cudagraph_variants import FakeGraph, Sim

N = 64


def accumulate_program(in_place: bool):
    """x <- x + y (the sum also returned as `copy` when not in place, so it is no output alias)."""
    prog = add_program(N)
    step = prog.steps[0]
    if in_place:
        step = Step(step.kind, step.target, step.inputs, step.outputs, make_attrs(inplace=(("out", "x"),)))
        return dataclasses.replace(prog, outputs=(), steps=(step,), writes=(("x", "out"),))
    return dataclasses.replace(prog, outputs=(), writes=(("x", "out"),))


@pytest.mark.parametrize("in_place", [True, False], ids=["stored-by-the-launch", "copied-after"])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_each_call_leaves_the_written_input_holding_its_value(in_place, layout):
    runner = ProgramRunner(accumulate_program(in_place), CompileOptions())
    base = torch.randn(N, 2) if layout == "strided" else torch.randn(N)
    x = base[:, 0] if layout == "strided" else base  # a caller's tensor the run must copy first
    y = torch.randn(N)
    expected = x.clone()
    for _ in range(4):  # the later calls take the specialized path
        assert runner([x, y]) == []
        expected += y
        torch.testing.assert_close(x, expected)


def test_the_launch_writes_the_callers_memory_itself():
    """In place: no output buffer is allocated; the launch's output is the caller's tensor."""
    runner = ProgramRunner(accumulate_program(True), CompileOptions())
    assert not runner.plain_allocs and not runner.slot_allocs
    x, y = torch.zeros(N), torch.ones(N)
    ptr = x.data_ptr()
    runner([x, y])
    assert x.data_ptr() == ptr and bool((x == 1).all())


class WritingFakeGraph(FakeGraph):
    """As FakeGraph, but recording runs nothing on the caller's memory, as a CUDA Graph capture
    does not: the record-time run writes clones of the inputs."""

    def __init__(self, runner, graph_inputs, values, device):
        written = {k for k, _ in runner.write_index}
        pinned = {i for i, t in enumerate(graph_inputs) if i < len(FakeGraph.current) and t is FakeGraph.current[i]}
        super().__init__(runner, [t.clone() if i in written else t for i, t in enumerate(graph_inputs)], values, device)
        self.pinned = {i: graph_inputs[i].data_ptr() for i in pinned}
        self.buffers = {i: t for i, t in enumerate(graph_inputs) if i not in pinned}


@pytest.mark.parametrize("pinned", [True, False], ids=["parameter-read-in-place", "copied-into-the-graph"])
def test_cudagraph_replays_apply_each_update_once(monkeypatch, pinned):
    """Under `cudagraph`: warm-ups write clones, the replay writes the input the graph reads, and
    one the graph copied into its buffer is copied back: an optimizer-like update applied once a call."""
    monkeypatch.setattr(cudagraph, "_current_device", lambda: -1)
    run = Sim(accumulate_program(True), CompileOptions(runtime="cudagraph"))

    def record_writing(inputs, own, values, device, warmups, share=None):  # Sim's recorder writes the caller's memory
        graph_inputs, buffers = run.graph_inputs(inputs, own, values)
        g = WritingFakeGraph(run.prog.runner, graph_inputs, values, device)
        run.graphs.append(g)
        return g, g.outputs, buffers

    run.prog._record_graph = record_writing
    x = torch.nn.Parameter(torch.zeros(N), requires_grad=False) if pinned else torch.zeros(N)
    y = torch.ones(N)
    for k in range(1, 6):
        run([x, y])
        torch.testing.assert_close(x.detach(), torch.full((N,), float(k)))
    assert run.graphs and sum(g.replays for g in run.graphs) >= 4  # replayed, not run as launches


def test_a_new_static_cache_each_generate_re_records_once_and_replays(monkeypatch):
    """transformers' `generate` with a static cache makes new cache tensors (marked static,
    unguarded) for every call and writes them in place each decoding step. Each generate's first
    step records a graph pinning its cache; the other steps replay it, the writes landing in that
    generate's cache; no copies of the cache, no plain launches, no warning, however many generates."""
    monkeypatch.setattr(cudagraph, "_current_device", lambda: -1)
    run = Sim(accumulate_program(True), CompileOptions(runtime="cudagraph"))

    def record_writing(inputs, own, values, device, warmups, share=None):
        graph_inputs, buffers = run.graph_inputs(inputs, own, values)
        g = WritingFakeGraph(run.prog.runner, graph_inputs, values, device)
        run.graphs.append(g)
        return g, g.outputs, buffers

    run.prog._record_graph = record_writing
    generates, steps = cudagraph.MAX_RECORDS + cudagraph.MAX_PRIVATE + 3, 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        caches = [torch.zeros(N) for _ in range(generates)]  # all alive: each at a new address
        for cache in caches:
            cache._dynamo_static_input_type = "unguarded"  # torch._dynamo.mark_static_address(cache)
            tokens = [torch.ones(N) for _ in range(steps)]  # all alive: a new address each step, copied
            for k in range(1, steps + 1):
                run([cache, tokens[k - 1]])
                torch.testing.assert_close(cache, torch.full((N,), float(k)))
    slot = run.slot()
    assert len(run.graphs) == generates and slot.private_records == 0
    assert all(not g.buffers.keys() & {0} for g in run.graphs)  # the cache is read in place, never copied
    assert sum(g.replays for g in run.graphs) == generates * steps  # every call replays (a capture runs nothing)
    assert run.general == generates  # one general call a generate (its record); the fast path for the rest

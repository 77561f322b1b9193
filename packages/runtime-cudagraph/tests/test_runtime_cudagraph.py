"""The `cudagraph` runtime: launch fallback on CPU; capture/replay on CUDA (skipped without)."""

from __future__ import annotations

import warnings

import pytest
import torch

from pipec_ir import Buffer, CompileOptions, Program, Ref, Step, make_attrs
from runtime_helpers import T, add_program, dynamic_add_program, extern_program, slot_program

from pipec_runtime_cudagraph import load_cudagraph, load_launch
from pipec_runtime_cudagraph.capture_support import capture_stream

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture()
def options():
    return CompileOptions(runtime="cudagraph")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-CUDA fallback")
def test_cpu_fallback_warns_and_runs_as_launch(options):
    with pytest.warns(RuntimeWarning, match="cudagraph runtime: no CUDA device, running as 'launch'"):
        run = load_cudagraph(add_program(20), options)
    x, y = torch.randn(20), torch.randn(20)
    torch.testing.assert_close(run([x, y])[0], x + y)


@cuda
@pytest.mark.parametrize("make", [add_program, slot_program, extern_program])
def test_replay_is_bitwise_equal_to_launch(options, make):
    prog = make()
    launch = load_launch(prog, options)
    graph = load_cudagraph(prog, options)
    torch.manual_seed(0)
    for _ in range(3):
        inputs = [torch.randn(*[int(d) for d in b.type.shape], device="cuda") for b in prog.inputs]
        want = launch(inputs)
        got = graph(inputs)
        for w, g in zip(want, got):
            if w is None:
                assert g is None
            else:
                assert torch.equal(w, g)
    assert graph.graphs, "no graph was captured"


@cuda
def test_outputs_the_caller_holds_are_never_overwritten(options):
    run = load_cudagraph(add_program(100), options)
    x, y = torch.randn(100, device="cuda"), torch.randn(100, device="cuda")
    kept = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for k in range(5):  # the first two own a graph each, the rest are copies
            kept.append(run([k * x, y])[0])
    for k, out in enumerate(kept):
        torch.testing.assert_close(out, k * x + y)
    assert len({t.data_ptr() for t in kept}) == len(kept)
    assert len([w for w in caught if "still holds outputs" in str(w.message)]) == 1


@cuda
def test_stable_inputs_are_read_in_place_and_dropped_outputs_not_copied(options):
    """The benchmark loop: same tensors, outputs dropped. From the second call on the graph reads
    both inputs where they are (a refill in place is seen) and returns its own output memory."""
    run = load_cudagraph(add_program(4096), options)
    x, y = torch.randn(4096, device="cuda"), torch.randn(4096, device="cuda")
    ptrs = []
    for k in range(6):
        if k == 4:
            x.copy_(torch.randn(4096, device="cuda"))
        (out,) = run([x, y])
        torch.testing.assert_close(out, x + y)
        ptrs.append(out.data_ptr())
        del out
    (slot,) = run.graphs.entries.values()
    (graph,) = slot.shared
    assert graph.pinned == {0: (x.data_ptr(), (1,)), 1: (y.data_ptr(), (1,))} and not graph.buffers
    assert len(set(ptrs[1:])) == 1


@cuda
def test_each_graph_has_its_own_pool_and_captures_on_pipecs_stream(options, monkeypatch):
    from pipec_runtime_cudagraph import cudagraph

    cleared, streams = [], []
    clear = torch._C._cuda_clearCublasWorkspaces
    monkeypatch.setattr(torch._C, "_cuda_clearCublasWorkspaces", lambda: cleared.append(1) or clear())
    begin = torch.cuda.CUDAGraph.capture_begin

    def spy(self, *args, **kwargs):  # the runtime calls capture_begin itself (no torch.cuda.graph)
        streams.append(torch.cuda.current_stream())
        return begin(self, *args, **kwargs)

    monkeypatch.setattr(torch.cuda.CUDAGraph, "capture_begin", spy)
    a, b = load_cudagraph(add_program(64), options), load_cudagraph(slot_program(), options)
    x = torch.randn(64, device="cuda")
    a([x, x])
    b([torch.randn(8, 37, device="cuda")])
    pools = {g.graph.pool() for prog in (a, b) for slot in prog.graphs.entries.values() for g in slot.shared}
    assert len(pools) == 2
    assert streams == [cudagraph.capture_stream(x.device)] * 2
    assert len(cleared) == 4  # before and after each capture


BORROWED_WORKSPACE = """
import sys, torch
sys.path.insert(0, {tests!r})
from runtime_helpers import extern_program
from pipec_ir import CompileOptions, LoadContext
from pipec_runtime_cudagraph import load_cudagraph

m, k, n = 64, 1 << 15, 64  # a skinny GEMM: cuBLAS splits K, with its workspace
a, b = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda")
a @ b.T  # cuBLAS's handle is made outside any capture
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):  # torch's default capture stream: its workspace is cached, in g's pool
    y = a @ b.T
run = load_cudagraph(extern_program(m, k, n), CompileOptions(runtime="cudagraph"), LoadContext(kernel_dir={kernels!r}))
x, w, bias = torch.randn(m, k, device="cuda"), torch.randn(n, k, device="cuda"), torch.randn(m, n, device="cuda")
want = x @ w.T + bias
run([x, w, bias])
del g, y
torch._C._cuda_clearCublasWorkspaces()  # as Inductor's CUDA Graph trees do around a recording
torch.cuda.empty_cache()  # g's pool is free: its memory goes back to the driver
for _ in range(3):
    got = run([x, w, bias])[0]
torch.cuda.synchronize()
torch.testing.assert_close(got, want, atol=1e-3, rtol=1e-3)
print("replays ok")
"""


@cuda
def test_a_workspace_of_another_capture_is_never_baked_in(tmp_path):
    """A GEMM captured on torch's default capture stream (Triton's do_bench_cudagraph times
    alternatives so) leaves its cuBLAS workspace cached for that stream, in its own pool; that
    graph dies, the workspaces are cleared (as Inductor's CUDA Graph trees do) and the pool's
    memory goes back to the driver. A pipec graph that had borrowed that workspace would write
    to unmapped memory at its next replay ("illegal memory access", which ends the CUDA context:
    hence the subprocess). On the H200 with torch 2.11 this GEMM replayed fine under the old
    runtime too (its kernel may not touch the workspace): the capture-side mechanism is checked
    by test_each_graph_has_its_own_pool_and_captures_on_pipecs_stream."""
    import os
    import pathlib
    import subprocess
    import sys

    tests = str(pathlib.Path(__file__).parent)
    script = BORROWED_WORKSPACE.format(tests=tests, kernels=str(tmp_path / "kernels"))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "replays ok" in done.stdout, done.stderr[-3000:]


@cuda
def test_dynamic_shapes_capture_per_size(options):
    run = load_cudagraph(dynamic_add_program(), options)
    for n in (10, 300, 10):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        torch.testing.assert_close(run([x, y])[0], x + y)
    assert len(run.graphs) == 2


@cuda
def test_capture_failure_falls_back_with_a_warning(options):
    prog = Program(  # nonzero synchronizes with the host: not capturable
        name="nz", inputs=(Buffer("x", T([8])),), outputs=("y",), buffers=(Buffer("y", T([8], "int64")),),
        kernels=(), steps=(Step("extern", "aten.nonzero.default", ("x",), ("y",), make_attrs(args=(Ref("x"),))),),
    )
    run = load_cudagraph(prog, options)
    x = torch.tensor([0, 1, 0, 2, 0, 0, 3, 0.0], device="cuda")
    with pytest.warns(RuntimeWarning, match="capturing program 'nz' failed"):
        (y,) = run([x])
    torch.testing.assert_close(y, torch.nonzero(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(run([x])[0], torch.nonzero(x))


@cuda
def test_unexpected_capture_failure_leaves_cuda_usable(options, monkeypatch):
    from pipec_runtime_cudagraph import cudagraph

    monkeypatch.setattr(cudagraph, "HOST_SYNC_TARGETS", frozenset())  # really try to capture nonzero
    prog = Program(
        name="nz2", inputs=(Buffer("x", T([4])),), outputs=("y",), buffers=(Buffer("y", T([4], "int64")),),
        kernels=(), steps=(Step("extern", "aten.nonzero.default", ("x",), ("y",), make_attrs(args=(Ref("x"),))),),
    )
    run = load_cudagraph(prog, options)
    x = torch.tensor([0, 1, 0, 2.0], device="cuda")
    with pytest.warns(RuntimeWarning, match="capturing program 'nz2' failed"):
        (y,) = run([x])
    torch.testing.assert_close(y, torch.nonzero(x))
    torch.randn(3, device="cuda")  # the RNG is not left in capture mode


@cuda
def test_autotune_picks_a_working_config(options):
    from pipec_ir import LaunchConfig

    configs = (LaunchConfig(constants=(("BLOCK", 64),)), LaunchConfig(constants=(("BLOCK", 1024),), num_warps=8))
    run = load_launch(add_program(5000, configs=configs), options)
    x, y = torch.randn(5000, device="cuda"), torch.randn(5000, device="cuda")
    torch.testing.assert_close(run([x, y])[0], x + y)
    assert run.tuned[("pipec_add_0", ())] in (0, 1)


@cuda
def test_cpu_inputs_on_a_cuda_machine_run_on_the_gpu(options):
    run = load_launch(slot_program(), options)
    x = torch.randn(8, 37)
    t3, t2 = run([x])
    assert t2.device.type == "cpu" and t3.device.type == "cpu"
    torch.testing.assert_close(t2, (x + x).sum(1))
    torch.testing.assert_close(t3, 2 * (x + x).sum(1))
    xc = x.cuda()
    torch.testing.assert_close(run([xc])[1], (xc + xc).sum(1))


@cuda
def test_one_graph_per_size_bucket_with_padding(options):
    from pipec_ir import RecompileLimitWarning
    from test_runtime_buckets import tunable_add  # pad_symbols=("s0",)

    run = load_cudagraph(tunable_add(), options.with_extra(recompile_limit=1))
    for n in (17, 20, 32, 1, 40):  # buckets 32, 32, 32, 1 (a re-record, charged), 64: over budget
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        if n == 40:
            with pytest.warns(RecompileLimitWarning):
                out = run([x, y])[0]
        else:
            out = run([x, y])[0]
        assert out.shape == (n,)
        torch.testing.assert_close(out, x + y)
    assert len(run.graphs) == 2


@cuda
def test_exact_buckets_record_per_size(options):
    from test_runtime_buckets import tunable_add

    run = load_cudagraph(tunable_add(), options.with_extra(bucket="exact"))
    for n in (17, 20, 17):
        x, y = torch.randn(n, device="cuda"), torch.randn(n, device="cuda")
        torch.testing.assert_close(run([x, y])[0], x + y)
    assert len(run.graphs) == 2


@cuda
def test_parameters_are_captured_at_their_address_not_copied(options):
    run = load_cudagraph(add_program(100), options)
    w = torch.nn.Parameter(torch.randn(100, device="cuda"), requires_grad=False)
    x = torch.randn(100, device="cuda")
    torch.testing.assert_close(run([x, w])[0], x + w)
    (slot,) = run.graphs.entries.values()
    (graph,) = slot.shared
    assert graph.pinned == {1: (w.data_ptr(), (1,))} and list(graph.buffers) == [0]  # x copied: first call
    with torch.no_grad():
        w.mul_(2)  # an optimizer-style in-place update is seen by the next replay
    torch.testing.assert_close(run([x, w])[0], x + w)
    w2 = torch.nn.Parameter(torch.randn(100, device="cuda"), requires_grad=False)
    torch.testing.assert_close(run([x, w2])[0], x + w2)  # moved: recorded again at the new address


@cuda
def test_replay_fast_path_checks_inputs(options):
    run = load_cudagraph(add_program(100), options)
    x, y = torch.randn(100, device="cuda"), torch.randn(100, device="cuda")
    run([x, y])
    assert run.replays
    torch.testing.assert_close(run([y, x])[0], x + y)
    with pytest.raises(RuntimeError, match="has dtype float64, expected float32"):
        run([x.double(), y])


@cuda
def test_a_re_record_runs_no_warm_up_and_captures_the_specialized_run_in_the_replaced_pool(options, monkeypatch):
    """A decoder's new static cache per `generate` costs a record each: past the first, it runs
    no warm-up, its capture runs the runner's specialized run, not the step-by-step general path
    (two general runs and a 10 ms compile were most of a Llama generate's extra host time), and
    it captures in the pool of the variant it replaces (whose parameter is gone)."""
    run = load_cudagraph(add_program(100), options)
    x = torch.randn(100, device="cuda")
    general = []
    original = type(run.runner).run

    def counting_run(self, *args, **kwargs):
        general.append(1)
        return original(self, *args, **kwargs)

    w = torch.nn.Parameter(torch.randn(100, device="cuda"), requires_grad=False)
    torch.testing.assert_close(run([x, w])[0], x + w)  # the first record builds the specialized run
    monkeypatch.setattr(type(run.runner), "run", counting_run)
    pools = []
    for _ in range(3):
        w = torch.nn.Parameter(torch.randn(100, device="cuda") + 0 * w, requires_grad=False)  # moved
        torch.testing.assert_close(run([x, w])[0], x + w)
        (slot,) = run.graphs.entries.values()
        pools.append(slot.shared[0].graph.pool())
    assert slot.records >= 3 and general == []
    assert len(set(pools)) == 1 and len(slot.shared) == 1  # one pool, taken over at each re-record


def _active_blocks_by_pool() -> dict:
    """{memory pool id: [(address, size) of each live block]}, the caller's own pool being (0, 0)."""
    pools: dict = {}
    for segment in torch.cuda.memory_snapshot():
        blocks = pools.setdefault(tuple(segment.get("segment_pool_id", (0, 0))), [])
        blocks += [(b["address"], b["size"]) for b in segment["blocks"] if b["state"] == "active_allocated"]
    return pools


@cuda
def test_a_re_record_allocates_nothing_in_the_callers_memory(options):
    """The buffers a graph copies its inputs into are made inside its capture, in its pool. Made
    in the caller's pool at each record, they took blocks between a decoder's generates, and
    the next static cache landed elsewhere: a record every generate (Llama-1B under pipec on an
    H100, session 52), where under Inductor the cache came back to the same addresses."""
    run = load_cudagraph(add_program(100), options)
    x1 = torch.randn(100, device="cuda")
    w = torch.nn.Parameter(torch.randn(100, device="cuda"), requires_grad=False)
    run([x1, w])  # the first record: warm-ups, whose copies are freed again
    x = torch.randn(100, device="cuda")  # elsewhere (x1 is alive): read from a buffer
    w = torch.nn.Parameter(torch.randn(100, device="cuda"), requires_grad=False)  # moved: a re-record
    expected = x + w
    before = set(_active_blocks_by_pool().get((0, 0), []))
    out = run([x, w])[0]
    assert set(_active_blocks_by_pool().get((0, 0), [])) <= before  # the output is the graph's, an alias
    torch.testing.assert_close(out, expected)
    (slot,) = run.graphs.entries.values()
    graph = slot.shared[0]
    assert list(graph.buffers) == [0] and list(graph.pinned) == [1]
    address = graph.buffers[0].data_ptr()
    pool = tuple(graph.graph.pool())
    assert any(a <= address < a + size for a, size in _active_blocks_by_pool().get(pool, []))


@cuda
def test_a_first_record_leaves_no_memory_cached_for_pipecs_stream_in_the_callers_pool(options):
    """A key's first record warms up twice: the first run (compiles, tunes) on the caller's stream,
    the last on pipec's capture stream allocating from the graph's pool. Both on pipec's stream in
    the caller's pool, they left segments cached for that stream alone, which no work of the
    caller's could reuse until an `empty_cache`."""
    run = load_cudagraph(add_program(1 << 20), options)
    x = torch.randn(1 << 20, device="cuda")
    w = torch.nn.Parameter(torch.randn(1 << 20, device="cuda"), requires_grad=False)
    torch.testing.assert_close(run([x, w])[0], x + w)
    torch.testing.assert_close(run([x, w])[0], x + w)  # a replay
    stream = capture_stream(torch.device("cuda")).cuda_stream
    stranded = [s["total_size"] for s in torch.cuda.memory_snapshot()
                if tuple(s.get("segment_pool_id", (0, 0))) == (0, 0) and s["stream"] == stream]
    assert stranded == []

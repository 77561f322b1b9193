"""How choice groups are timed (the CPU has no GPU timer: Triton's timers are stand-ins here)."""

import pytest
import torch
import triton.testing

from pipec_runtime_cudagraph.choices import _timed
from pipec_runtime_cudagraph.extern_ops import _addmm_gelu_tanh_any
from pipec_runtime_cudagraph.rounds import ROUNDS


def _record(calls, name, result=1.0, error=None):
    def bench(fn, **kwargs):
        calls.append(name)
        if error is not None:
            raise error
        fn()
        return result
    return bench


def _graph_bench(monkeypatch, calls, result=1.0, error=None):
    """choices.GraphBench replaced by a stand-in timing with `_record`; `calls` also gets "close"."""
    from pipec_runtime_cudagraph import choices

    class Bench:
        __call__ = staticmethod(_record(calls, "graph", result, error))

        def close(self):
            calls.append("close")
    monkeypatch.setattr(choices, "GraphBench", Bench)


def test_launch_times_small_gemms_on_the_wall_clock_and_long_ones_on_the_gpu(monkeypatch):
    """Under `launch` a run's host work counts when its kernels are short (it is paid every
    call); once the fastest alternative keeps the GPU busy for GPU_BOUND_MS, GPU time decides."""
    from pipec_runtime_cudagraph.choices import GPU_BOUND_MS

    calls = []
    monkeypatch.setattr(triton.testing, "do_bench", _record(calls, "wall", 3.0))
    ran = []
    runs = {"a": lambda: ran.append("a"), "b": lambda: ran.append("b")}
    _graph_bench(monkeypatch, calls, GPU_BOUND_MS / 2)
    assert _timed(runs, graphed=False) == {"a": 3.0, "b": 3.0}
    # every alternative once per round, the rounds forward and backward in turn (rounds.py)
    assert calls == ["graph"] * 2 * ROUNDS + ["close"] + ["wall"] * 2 * ROUNDS and ran == ["a", "b", "b", "a"] * ROUNDS
    calls.clear()
    _graph_bench(monkeypatch, calls, GPU_BOUND_MS)
    assert _timed(runs, graphed=False) == {"a": GPU_BOUND_MS, "b": GPU_BOUND_MS}
    assert calls == ["graph"] * 2 * ROUNDS + ["close"]


def test_gpu_time_under_cuda_graphs_and_wall_clock_for_all_when_one_cannot_be_captured(monkeypatch):
    calls = []
    monkeypatch.setattr(triton.testing, "do_bench", _record(calls, "wall", 2.0))
    _graph_bench(monkeypatch, calls, 0.5)
    assert _timed({"a": lambda: None, "b": lambda: None}, graphed=True) == {"a": 0.5, "b": 0.5}
    assert calls == ["graph"] * 2 * ROUNDS + ["close"]
    calls.clear()
    _graph_bench(monkeypatch, calls, error=RuntimeError("sync"))
    assert _timed({"a": lambda: None, "b": lambda: None}, graphed=True) == {"a": 2.0, "b": 2.0}
    assert calls == ["graph", "close"] + ["wall"] * 2 * ROUNDS  # the first failed capture ends graph timing


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_timing_on_cuda_graphs_leaves_no_cublas_workspace_behind():
    """Each graph timing warms up on a new stream, where a GEMM's first call makes PyTorch cache a
    cuBLAS workspace for good (SD 1.5's first call held about 1 GiB of them). Timing GEMM
    alternatives leaves the memory allocated as it was."""
    a, b = (torch.randn(512, 512, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = {}
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    for _ in range(3):
        times = _timed({"mm": lambda: out.update(mm=a @ b), "t": lambda: out.update(t=(b.t() @ a.t()).t())},
                       graphed=True)
        assert all(0 < t < float("inf") for t in times.values())
    out.clear()
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() <= before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_graph_bench_captures_each_run_once_and_times_it_on_the_gpu_clock():
    """Rounds replay the graph captured at a run's first timing; a run doing twice the GEMMs
    takes about twice the time; `close` drops the graphs."""
    from pipec_runtime_cudagraph.graph_bench import GraphBench

    a, b = (torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    out = {}
    one, two = (lambda: out.update(x=a @ b)), (lambda: out.update(x=(a @ b) @ b))
    bench = GraphBench()
    try:
        times = []
        for _ in range(ROUNDS):
            times.append((bench(one), bench(two)))
            assert set(bench.graphs) == {one, two}  # captured at the first round, replayed since
        ratio = sum(t for _, t in times) / sum(t for t, _ in times)
        assert 1.6 < ratio < 2.5, times
    finally:
        bench.close()
    assert not bench.graphs


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
def test_addmm_gelu_tanh_extern_is_tanh_gelu_on_every_device(device):
    torch.manual_seed(0)
    bias, a, b = (torch.randn(*s, device=device) for s in ((24,), (16, 32), (32, 24)))
    want = torch.nn.functional.gelu(torch.addmm(bias, a, b), approximate="tanh")
    torch.testing.assert_close(torch.ops.pipec.addmm_gelu_tanh(bias, a, b), want)
    torch.testing.assert_close(_addmm_gelu_tanh_any(bias, a, b), want)


def test_rounds_alternate_order_and_cancel_a_linear_clock_drift():
    """Three identical candidates on a GPU that slows by 1 ms per timing: timed once each, the
    first would win by 2 ms; over rounds of alternating order all three get the same mean."""
    from pipec_runtime_cudagraph.rounds import time_in_rounds

    order = []

    def drifting(call):
        order.append(call())
        return float(len(order))
    calls = {name: (lambda n=name: n) for name in "abc"}
    times, errors = time_in_rounds(calls, drifting, rounds=4)
    assert errors == {} and order == list("abccba") * 2
    assert times == {"a": 6.5, "b": 6.5, "c": 6.5}
    order.clear()
    assert time_in_rounds({"a": calls["a"]}, drifting)[0] == {"a": 1.0} and order == ["a"]  # alone: once


def test_rounds_give_a_failing_candidate_inf_and_time_it_once():
    from pipec_runtime_cudagraph.rounds import time_in_rounds

    tried = []

    def bench(call):
        tried.append(call())
        if tried[-1] == "bad":
            raise RuntimeError("out of shared memory")
        return 1.0
    times, errors = time_in_rounds({"bad": lambda: "bad", "ok": lambda: "ok"}, bench, rounds=4, prune=None)
    assert times == {"bad": float("inf"), "ok": 1.0} and list(errors) == ["bad"]
    assert tried.count("bad") == 1 and tried.count("ok") == 4
    tried.clear()
    times, errors = time_in_rounds({"bad": lambda: "bad", "ok": lambda: "ok"}, bench, stop_on_error=True)
    assert times == {"bad": float("inf"), "ok": float("inf")} and tried == ["bad"]


def test_rounds_stop_timing_clear_losers_after_one_round_each_way():
    """After two rounds, a candidate over PRUNE x the best mean keeps its two samples and is not
    timed again; close ones go on for all four rounds; a lone survivor is not timed alone."""
    from pipec_runtime_cudagraph.rounds import PRUNE, time_in_rounds

    cost = {"fast": 1.0, "close": 1.1, "slow": 2.0}
    tried = []

    def bench(call):
        tried.append(call())
        return cost[tried[-1]]
    calls = {name: (lambda n=name: n) for name in cost}
    times, _ = time_in_rounds(calls, bench, rounds=4)
    assert times == cost and 1.1 <= PRUNE < 2.0
    assert tried.count("fast") == tried.count("close") == 4 and tried.count("slow") == 2
    tried.clear()
    times, _ = time_in_rounds({"fast": calls["fast"], "slow": calls["slow"]}, bench, rounds=4)
    assert times == {"fast": 1.0, "slow": 2.0} and tried == ["fast", "slow", "slow", "fast"]
    tried.clear()
    time_in_rounds(calls, bench, rounds=4, prune=None)  # max-autotune: every candidate, every round
    assert all(tried.count(name) == 4 for name in cost)


class _Write:
    """A stand-in step: writes a constant vector into value slot `slot`."""

    def __init__(self, slot: int, value: float):
        self.writes, self.value = (slot,), value

    def __call__(self, vals, symvals, device):
        vals[self.writes[0]] = torch.full((4,), self.value)


def test_an_alternative_that_disagrees_with_the_default_is_never_picked(monkeypatch):
    """Each alternative's outputs (the slots every alternative writes) are checked against the
    default's before timing: the fastest one here is wrong and loses, with a warning; one that
    differs only by rounding (and writes an intermediate of its own) is kept."""
    import math

    from pipec_runtime_cudagraph import choices
    from pipec_runtime_cudagraph.choices import ChoiceStep, disagreement

    alternatives = {"fast_wrong": [_Write(0, 2.0)], "template": [_Write(0, 1.0)],
                    "library": [_Write(1, 9.0), _Write(0, 1.0005)]}
    speed = {"template": 3.0, "fast_wrong": 1.0, "library": 2.0}
    monkeypatch.setattr(choices, "_timed", lambda runs, graphed, prune: {n: speed[n] for n in runs})
    step = ChoiceStep(None, "group", alternatives, "template", True, None)
    with pytest.warns(RuntimeWarning, match="'fast_wrong' of group disagrees with 'template'"):
        chosen = step._time_alternatives([None, None], (), torch.device("cpu"), (), "wall")
    assert chosen == "library" and step.timings[()] == {"fast_wrong": math.inf, "template": 3.0, "library": 2.0}
    # NaN where the reference has NaN agrees; a bf16 rounding step agrees; a garbage value does not
    nan = torch.tensor([1.0, float("nan"), 4.0])
    assert disagreement([nan.clone()], [nan]) is None
    half = torch.tensor([8.0, 0.5], dtype=torch.bfloat16)
    assert disagreement([half + torch.tensor([0.0625, 0.0], dtype=torch.bfloat16)], [half]) is None
    assert "max error" in disagreement([half + torch.tensor([1.0, 0.0], dtype=torch.bfloat16)], [half])


def test_an_fp32_output_of_bf16_operands_is_held_to_bf16s_tolerance():
    """GPT-2's LM head: cuBLAS rounds the bf16 product before the fp32 cast (as eager), the
    template casts its fp32 accumulator: one bf16 step apart, both right; the cuBLAS alternative
    is kept. A garbage value is still caught."""
    from pipec_runtime_cudagraph.choices import disagreement, operand_dtypes

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, 64, generator=g).bfloat16(), torch.randn(64, 32, generator=g).bfloat16()
    exact = a.float() @ b.float()
    rounded = (a @ b).float()
    assert disagreement([rounded], [exact]) is not None  # fp32's own tolerance: "disagrees"
    assert disagreement([rounded], [exact], {"bfloat16"}) is None
    wrong = exact.clone()
    wrong[3, 5] += exact.abs().max()
    assert "max error" in disagreement([wrong], [exact], {"bfloat16"})

    class Launch:  # a launch step: its input slots come first in `ptrs`
        def __init__(self, ptrs, n_inputs):
            self.ptrs, self.n_inputs = ptrs, n_inputs

    vals = [a, b, exact, torch.arange(3)]
    assert operand_dtypes({"template": [Launch((0, 1, 3, 2), 3)], "library": [_Write(2, 0.0)]}, vals) == {"bfloat16"}


@pytest.mark.parametrize("m,k,n", [(24, 50, 16), (25, 48, 16), (24, 48, 13), (9, 11, 7), (24, 48, 16)])
@pytest.mark.parametrize("transposed", [False, True])
def test_mm_padded_is_mm(monkeypatch, m, k, n, transposed):
    """`pipec.mm_padded` pads M, K and N to multiples of 8 with zeros (here on any device, the
    size threshold lowered), keeps a transposed operand transposed, and slices the result back."""
    from pipec_runtime_cudagraph import extern_ops

    monkeypatch.setattr(extern_ops, "PAD_MIN_MACS", 0)
    monkeypatch.setattr(extern_ops, "PAD_MACS_PER_COPIED", 0)
    torch.manual_seed(0)
    a = torch.randn(k, m).t() if transposed else torch.randn(m, k)
    b = torch.randn(n, k).t() if transposed else torch.randn(k, n)
    out = extern_ops._mm_padded_cuda(a, b)
    assert out.shape == (m, n) and out.is_contiguous()
    torch.testing.assert_close(out, a @ b)
    torch.testing.assert_close(torch.ops.pipec.mm_padded(a, b), a @ b)  # the CPU kernel: plain mm
    assert extern_ops._padded(a, 0, 0) is a
    if transposed:
        assert extern_ops._padded(a, 3, 5).t().is_contiguous(), "a transposed operand stays transposed"

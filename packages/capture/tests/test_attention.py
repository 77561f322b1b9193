"""Masked attention keeps a fused kernel (attention.py): under AOTAutograd torch picks its fp32
math path for a masked CUDA call, so capture sends such calls to the memory-efficient kernel."""

import contextlib

import pytest
import torch
import torch.nn.functional as F

from pipec_capture.attention import attention_bias, efficient_attention_applies, masked_attention
from conftest import dynamo_capture

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def attend(q, k, v, mask):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def transformers_like_mask(batch, length, device="cpu"):
    """A boolean [batch, 1, q, k] mask made by expanding, as transformers' masking utils do under
    tracing (strides of 0), with a few padded keys."""
    keep = torch.ones(batch, length, dtype=torch.bool, device=device)
    keep[0, -3:] = False
    return keep[:, None, None, :].expand(batch, 1, length, length)


def externs(records):
    return [str(n.attr("target")) for graph, _, _ in records for n in graph.nodes if n.op == "extern"]


def test_cpu_calls_keep_torchs_choice():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 8) for _ in range(3))
    mask = transformers_like_mask(2, 8)
    out, records = dynamo_capture(attend, (q, k, v, mask))
    torch.testing.assert_close(out, attend(q, k, v, mask))
    assert not any("efficient" in t for t in externs(records))


def test_applies_only_to_layouts_the_kernel_takes():
    meta = dict(device="meta")
    q = torch.empty(2, 4, 16, 64, **meta)
    mask = torch.empty(2, 1, 16, 16, dtype=torch.bool, **meta)
    # meta tensors are not CUDA: never rewritten, whatever the layout
    assert not efficient_attention_applies(q, q, q, mask, 0.0, False, False)
    assert not efficient_attention_applies(q, q, q, None, 0.0, False, False)


def test_bias_rows_are_aligned_and_match_the_mask():
    torch.manual_seed(0)
    q = torch.randn(2, 3, 5, 8)
    k = torch.randn(2, 3, 20, 8)
    mask = torch.rand(2, 1, 5, 20) > 0.3
    bias = attention_bias(mask, q, k)
    assert bias.shape == (2, 3, 5, 20)
    assert bias.stride(-1) == 1 and bias.stride(-2) % 16 == 0
    expected = torch.where(mask, 0.0, float("-inf")).expand(2, 3, 5, 20)
    torch.testing.assert_close(bias, expected)


def test_one_bias_per_mask_shared_by_every_call_of_a_trace():
    """transformers hands one mask to every layer: while tracing, its bias is made once and shared
    (BERT base: twelve 4 MiB copies before), per dtype; a mask broadcast along the keys gets full
    rows; real tensors (a graph run eagerly) get a fresh bias each call, their values may change."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def two_layers(q, k, keep):
        mask = keep[:, None, None, :].expand(2, 1, 5, 20)
        return attention_bias(mask, q, k) * 2 + attention_bias(mask, q, k) + attention_bias(mask, q.half(), k)

    torch.manual_seed(0)
    q, k, keep = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 20, 8), torch.rand(2, 20) > 0.3
    for mode in ("fake", "symbolic"):
        traced = make_fx(two_layers, tracing_mode=mode)(q, k, keep)
        wheres = [n for n in traced.graph.nodes if "where" in str(n.target)]
        assert len(wheres) == 2, (mode, wheres)  # one per dtype
        torch.testing.assert_close(traced(q, k, keep), two_layers(q, k, keep))
    mask = torch.rand(2, 1, 5, 20) > 0.3
    first = attention_bias(mask, q, k)
    mask.logical_not_()
    torch.testing.assert_close(attention_bias(mask, q, k), torch.where(mask, 0.0, float("-inf")).expand(2, 3, 5, 20))
    assert first.data_ptr() != attention_bias(mask, q, k).data_ptr()
    keys = torch.rand(2, 1, 5, 1) > 0.5  # one flag per query row, broadcast along the keys
    bias = attention_bias(keys, q, k)
    assert bias.shape == (2, 3, 5, 20) and bias.stride(-1) == 1
    torch.testing.assert_close(bias, torch.where(keys, 0.0, float("-inf")).expand(2, 3, 5, 20))


def test_cudnn_is_never_checked_off_cuda():
    from pipec_capture.attention import cudnn_attention_checked

    assert not cudnn_attention_checked(torch.device("cpu"), torch.bfloat16)
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    mask = torch.rand(1, 1, 6, 6) > 0.2
    calls = []

    def backend(gm, example_inputs):
        from pipec_capture.attention import choose_attention_kernels
        choose_attention_kernels(gm)
        calls.extend(n for n in gm.graph.nodes if n.target is masked_attention)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(attend, backend=backend)(q, k, v, mask)
    assert calls and not any(c.kwargs.get("cudnn_checked") for c in calls)


def test_masked_attention_falls_back_off_cuda():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    mask = torch.rand(1, 1, 6, 6) > 0.2
    mask[..., 0] = True
    torch.testing.assert_close(masked_attention(q, k, v, mask), attend(q, k, v, mask))


def expected_kernel(dtype) -> str:
    """The library call a masked CUDA call of `dtype` becomes: cuDNN's where its check passed on
    this GPU (half types), else the memory-efficient kernel."""
    from pipec_capture.attention import cudnn_attention_checked

    checked = cudnn_attention_checked(torch.device("cuda"), dtype) and torch.backends.cuda.cudnn_sdp_enabled()
    return "_scaled_dot_product_cudnn_attention" if checked else "_scaled_dot_product_efficient_attention"


@cuda
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("length", [64, 20])
def test_cuda_masked_attention_runs_a_fused_kernel(dtype, length):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, length, 64, device="cuda", dtype=dtype) for _ in range(3))
    mask = transformers_like_mask(2, length, "cuda")
    out, records = dynamo_capture(attend, (q, k, v, mask), check=False)
    expected = attend(q.double(), k.double(), v.double(), mask).to(dtype)
    tol = {torch.float32: dict(atol=1e-4, rtol=1e-4)}.get(dtype, dict(atol=2e-2, rtol=2e-2))
    torch.testing.assert_close(out, expected, **tol)
    kernel = expected_kernel(dtype)
    assert any(kernel in t for t in externs(records)), externs(records)
    if dtype == torch.float32:
        assert kernel == "_scaled_dot_product_efficient_attention"  # cuDNN's attention takes half types only


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_masked_attention_trains(dtype):
    torch.manual_seed(0)
    leaves = [torch.randn(2, 4, 32, 64, device="cuda", dtype=dtype, requires_grad=True) for _ in range(3)]
    mask = transformers_like_mask(2, 32, "cuda")
    out, records = dynamo_capture(attend, (*leaves, mask), grad=True, check=False)
    out.float().pow(2).sum().backward()
    got = [t.grad for t in leaves]
    twins = [t.detach().double().requires_grad_() for t in leaves]
    attend(*twins, mask).pow(2).sum().backward()
    tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=5e-2, rtol=5e-2)
    for g, t in zip(got, twins):
        torch.testing.assert_close(g, t.grad.to(dtype), **tol)
    assert any(expected_kernel(dtype) + "_backward" in t for t in externs(records)), externs(records)


@contextlib.contextmanager
def cudnn_sdp_disabled():
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(was)


@cuda
def test_cuda_masked_attention_keeps_the_efficient_kernel_with_cudnn_disabled():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = transformers_like_mask(2, 32, "cuda")
    with cudnn_sdp_disabled():
        out, records = dynamo_capture(attend, (q, k, v, mask), check=False)
    torch.testing.assert_close(out, attend(q.double(), k.double(), v.double(), mask).to(q.dtype), atol=2e-2, rtol=2e-2)
    assert not any("cudnn" in t for t in externs(records)), externs(records)


@cuda
def test_cuda_layers_sharing_a_mask_share_one_bias():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 32, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = transformers_like_mask(2, 32, "cuda")

    def two_layers(q, k, v, mask):
        return attend(attend(q, k, v, mask), k, v, mask)

    out, records = dynamo_capture(two_layers, (q, k, v, mask), check=False)
    expected = two_layers(q.double(), k.double(), v.double(), mask).to(q.dtype)
    torch.testing.assert_close(out, expected, atol=2e-2, rtol=2e-2)
    wheres = [n for graph, _, _ in records for n in graph.nodes if n.op == "where"]
    assert len(wheres) == 1, wheres


def test_dynamo_graph_calls_are_rewritten():
    from pipec_capture.attention import choose_attention_kernels

    graphs = []

    def backend(gm, example_inputs):
        graphs.append(choose_attention_kernels(gm))
        return gm.forward

    q = torch.randn(1, 2, 4, 8)
    mask = torch.ones(4, 4, dtype=torch.bool)
    torch._dynamo.reset()
    out = torch.compile(attend, backend=backend)(q, q, q, mask)
    torch.testing.assert_close(out, attend(q, q, q, mask))
    targets = [n.target for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert masked_attention in targets
    assert F.scaled_dot_product_attention not in targets


class MaskedByFactories(torch.nn.Module):
    """As transformers' encoders under tracing: a padding mask of ones (no padding given) made
    into a [batch, 1, q, k] boolean mask from factories and static sizes."""

    def __init__(self, pad: bool = False):
        super().__init__()
        self.pad = pad

    def forward(self, q, k, v):
        batch, length = q.shape[0], q.shape[2]
        keep = torch.ones(batch, length, dtype=torch.bool, device=q.device)
        if self.pad:
            keep = keep & (torch.arange(length, device=q.device) < length - 2)
        positions = torch.arange(length, device=q.device)
        mask = keep[:, None, None, :] & (positions[None, :] >= 0)[None, None]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.expand(batch, 1, length, length))


def rewritten_calls(model):
    """Compile `model` on random q, k, v with a backend that runs choose_attention_kernels; the
    output is checked against eager; returns the rewritten attention calls (fx nodes)."""
    from pipec_capture.attention import choose_attention_kernels

    calls = []

    def backend(gm, example_inputs):
        choose_attention_kernels(gm)
        calls.extend(n for n in gm.graph.nodes if n.target is masked_attention)
        return gm.forward

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 6, 8) for _ in range(3))
    torch._dynamo.reset()
    out = torch.compile(model, backend=backend)(q, k, v)
    torch.testing.assert_close(out, model(q, k, v))
    return calls


def mask_of(call):
    return call.kwargs.get("attn_mask", call.args[3] if len(call.args) > 3 else None)


@pytest.mark.parametrize("pad", [False, True])
def test_constant_mask_that_passes_everything_is_dropped(pad):
    calls = rewritten_calls(MaskedByFactories(pad))
    assert (mask_of(calls[0]) is None) != pad  # a mask that hides positions is kept


class CausalByFactories(torch.nn.Module):
    """A decoder's mask as transformers builds it under tracing: causal & no padding."""

    def __init__(self, as_float: bool = False):
        super().__init__()
        self.as_float = as_float

    def forward(self, q, k, v):
        length = q.shape[2]
        positions = torch.arange(length, device=q.device)
        mask = (positions[:, None] >= positions[None, :])[None, None].expand(q.shape[0], 1, length, length)
        if self.as_float:
            mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(~mask, torch.finfo(q.dtype).min)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize("as_float", [False, True])
def test_constant_causal_mask_becomes_is_causal(as_float):
    calls = rewritten_calls(CausalByFactories(as_float))
    assert calls[0].kwargs.get("is_causal") is True
    assert mask_of(calls[0]) is None


@pytest.fixture
def fake_gpu(monkeypatch):
    """cudnn_attention_checked on a pretend GPU: the check itself counted and answered by
    `answers` (a problem string or None), the device's identity made up; the per-process memo
    emptied before and after."""
    from types import SimpleNamespace

    from pipec_capture import attention

    runs, answers = [], [None]
    monkeypatch.setattr(attention, "_cudnn_check_problem", lambda device, dtype: runs.append(dtype) or answers[0])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(name="Pretend GPU", major=9, minor=0))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "Pretend GPU")
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91000)
    attention._CUDNN_CHECKED.clear()
    yield attention, runs, answers
    attention._CUDNN_CHECKED.clear()


def test_a_cudnn_verdict_kept_on_disk_spares_the_next_process_the_check(fake_gpu, tmp_path, monkeypatch):
    attention, runs, answers = fake_gpu
    gpu = torch.device("cuda", 0)
    assert attention.cudnn_attention_checked(gpu, torch.bfloat16, str(tmp_path))
    assert runs == [torch.bfloat16]
    attention._CUDNN_CHECKED.clear()  # a new process
    assert attention.cudnn_attention_checked(gpu, torch.bfloat16, str(tmp_path))
    assert runs == [torch.bfloat16], "the stored verdict is read, not checked again"
    # another dtype, or another cuDNN, is another verdict: checked
    assert attention.cudnn_attention_checked(gpu, torch.float16, str(tmp_path))
    attention._CUDNN_CHECKED.clear()
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 92000)
    answers[0] = "dq off by 0.5"
    with pytest.warns(UserWarning, match="dq off by 0.5"):
        assert not attention.cudnn_attention_checked(gpu, torch.bfloat16, str(tmp_path))
    assert runs == [torch.bfloat16, torch.float16, torch.bfloat16]
    attention._CUDNN_CHECKED.clear()
    # a stored failure is a failure again, warned again, without a check
    with pytest.warns(UserWarning, match="dq off by 0.5 .a stored verdict"):
        assert not attention.cudnn_attention_checked(gpu, torch.bfloat16, str(tmp_path))
    assert len(runs) == 3


def test_an_unreadable_verdict_file_means_checking_again(fake_gpu, tmp_path):
    attention, runs, _ = fake_gpu
    (tmp_path / attention.VERDICTS_FILE).write_text("{not json")
    assert attention.cudnn_attention_checked(torch.device("cuda", 0), torch.bfloat16, str(tmp_path))
    assert len(runs) == 1
    import json
    stored = json.loads((tmp_path / attention.VERDICTS_FILE).read_text())
    assert [v["ok"] for v in stored.values()] == [True]


def test_without_a_directory_the_verdict_lives_only_in_the_process(fake_gpu, tmp_path):
    attention, runs, _ = fake_gpu
    assert attention.cudnn_attention_checked(torch.device("cuda", 0), torch.bfloat16, None)
    attention._CUDNN_CHECKED.clear()
    assert attention.cudnn_attention_checked(torch.device("cuda", 0), torch.bfloat16, None)
    assert len(runs) == 2 and not list(tmp_path.iterdir())


def test_the_cudnn_check_is_its_own_part_of_the_compile_profile(fake_gpu, tmp_path, monkeypatch):
    """The check runs inside torch.compile's backend call: without a part of its own its seconds
    (0.3-0.4 s a process on an H100, 2.6 s the first time on a machine) read as AOTAutograd's."""
    import time

    from pipec_ir import CompileProfile

    attention, runs, _ = fake_gpu
    monkeypatch.setattr(attention, "_cudnn_check_problem", lambda device, dtype: time.sleep(0.05) or runs.append(dtype))
    profile = CompileProfile()
    with profile.measure(), profile.part("aot_autograd"):
        assert attention.cudnn_attention_checked(torch.device("cuda", 0), torch.bfloat16, str(tmp_path), profile)
    assert runs == [torch.bfloat16]
    assert profile.parts()["device_checks"] >= 0.05 > profile.parts()["aot_autograd"]
    attention._CUDNN_CHECKED.clear()  # a new process reads the verdict: no check, no time
    profile = CompileProfile()
    with profile.measure():
        assert attention.cudnn_attention_checked(torch.device("cuda", 0), torch.bfloat16, str(tmp_path), profile)
    assert profile.parts()["device_checks"] == 0.0 and runs == [torch.bfloat16]

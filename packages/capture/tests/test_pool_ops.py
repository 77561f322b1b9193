"""Pooling lowered to window slices (pipec_capture.lower_pool): IR evaluated by the reference interpreter."""

import pytest
import torch
import torch.nn.functional as F

from test_ops import check, lower, ops

g = torch.Generator().manual_seed(2)
X4 = torch.randn(2, 3, 7, 9, generator=g)          # odd sizes
X3 = torch.randn(3, 6, 5, generator=g)             # unbatched (C, H, W)
V5 = torch.randn(1, 2, 5, 6, 7, generator=g)       # 3-D pooling, batched
V4 = torch.randn(2, 4, 5, 3, generator=g)          # 3-D pooling, unbatched
NAN = X4.clone()
NAN[0, 1, 2, 3] = float("nan")
NAN[1, 2, 5, 5:7] = float("nan")                   # two NaNs in one window
TIES = torch.tensor([[[[1.0, 3.0, 3.0, 0.0], [3.0, -1.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0]]]])
NEG_INF = torch.full((1, 2, 4, 4), float("-inf"))

AVG = {
    "avg2d": (lambda x: F.avg_pool2d(x, 3), X4),
    "avg2d_stride_pad": (lambda x: F.avg_pool2d(x, (3, 2), stride=(2, 1), padding=1), X4),
    "avg2d_exclude_pad": (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), X4),
    "avg2d_ceil": (lambda x: F.avg_pool2d(x, 2, stride=2, ceil_mode=True), X4),
    "avg2d_ceil_pad_exclude": (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                      count_include_pad=False), X4),
    "avg2d_divisor": (lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, divisor_override=5), X4),
    "avg2d_unbatched": (lambda x: F.avg_pool2d(x, (2, 3), stride=(1, 2), padding=(1, 1), ceil_mode=True), X3),
    "avg1d": (lambda x: F.avg_pool1d(x, 3, stride=2, padding=1, ceil_mode=True), X3),
    "avg3d": (lambda x: F.avg_pool3d(x, 2, stride=(1, 2, 2), padding=(0, 1, 1)), V5),
    "avg3d_ceil_exclude": (lambda x: F.avg_pool3d(x, 3, stride=2, padding=1, ceil_mode=True,
                                                  count_include_pad=False), V5),
    "avg3d_unbatched_divisor": (lambda x: F.avg_pool3d(x, (2, 2, 1), divisor_override=3), V4),
}

MAX = {
    "max2d": (lambda x: F.max_pool2d(x, 3, return_indices=True), X4),
    "max2d_stride_pad": (lambda x: F.max_pool2d(x, (3, 2), stride=(2, 1), padding=1, return_indices=True), X4),
    "max2d_dilation": (lambda x: F.max_pool2d(x, 3, stride=1, padding=1, dilation=(2, 3), return_indices=True), X4),
    "max2d_ceil": (lambda x: F.max_pool2d(x, 2, stride=2, ceil_mode=True, return_indices=True), X4),
    "max2d_ceil_pad_dilation": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, dilation=2, ceil_mode=True,
                                                       return_indices=True), X4),
    "max2d_nan": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True), NAN),
    "max2d_ties": (lambda x: F.max_pool2d(x, 2, stride=1, return_indices=True), TIES),
    "max2d_all_neg_inf": (lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True), NEG_INF),
    "max2d_unbatched": (lambda x: F.max_pool2d(x, 2, stride=(2, 1), padding=1, ceil_mode=True,
                                               return_indices=True), X3),
    "max1d": (lambda x: F.max_pool1d(x, 3, stride=2, padding=1, return_indices=True), X3),
    "max3d": (lambda x: F.max_pool3d(x, 2, stride=(1, 2, 2), padding=(0, 1, 1), return_indices=True), V5),
    "max3d_dilation_ceil": (lambda x: F.max_pool3d(x, 2, stride=2, dilation=(1, 2, 1), ceil_mode=True,
                                                   return_indices=True), V5),
    "max3d_unbatched": (lambda x: F.max_pool3d(x, (2, 3, 2), padding=1, return_indices=True), V4),
}


@pytest.mark.parametrize("name", sorted(AVG) + sorted(MAX))
def test_pool_lowering(name):
    fn, x = {**AVG, **MAX}[name]
    graph = check(fn, x)
    assert "extern" not in ops(graph)
    # window taps are slices of the (padded) input, or, for an undilated pool reaching into
    # the padding, gathers of the input at clamped coordinates (no padded copy)
    assert "slice" in ops(graph) or "take" in ops(graph)


@pytest.mark.parametrize("fn", [
    lambda x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),  # ResNet's stem
    lambda x: F.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False),  # PoolFormer's token mixer
    lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True),  # windows past the padding too
])
def test_an_undilated_pool_with_padding_reads_no_padded_copy(fn):
    """Every tap gathers from the input itself; no IR value has the padded input's size."""
    graph = check(fn, X4)
    sizes = {tuple(n.type.shape[-2:]) for n in graph.nodes}
    padded = tuple(s + 2 for s in X4.shape[2:])
    assert padded not in sizes and "take" in ops(graph) and "slice" not in ops(graph)


def test_float16_average_accumulates_in_float32():
    x = X4.to(torch.float16)
    graph = check(lambda x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False), x)
    assert "extern" not in ops(graph)


@pytest.mark.parametrize("fn", [
    lambda x: F.avg_pool2d(x, 9),                      # 81 taps: over the limit
    lambda x: F.max_pool2d(x, (7, 10), padding=3),     # 70 taps
])
def test_large_window_stays_extern(fn):
    graph, _ = lower(fn, torch.randn(1, 1, 12, 12))
    externs = [n for n in graph.nodes if n.op == "extern"]
    assert len(externs) == 1 and "taps" in externs[0].attr("reason")


@pytest.mark.parametrize("fn", [
    lambda x: F.avg_pool2d(x, 2, padding=1),
    lambda x: F.max_pool2d(x, 2, padding=1, return_indices=True),
])
def test_empty_batch_is_a_fill(fn):
    graph = check(fn, torch.randn(0, 2, 4, 5))
    assert set(ops(graph)) == {"full"}


ADAPTIVE = {
    "adaptive_divisible": (lambda x: F.adaptive_avg_pool2d(x, (7, 3)), X4),
    "adaptive_uneven": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)), X4),        # windows of 3 and 4 rows
    "adaptive_upsampling": (lambda x: F.adaptive_avg_pool2d(x, (4, 7)), X3),     # output larger than input
    "adaptive_1d": (lambda x: F.adaptive_avg_pool1d(x, 4), X3),
}


@pytest.mark.parametrize("name", sorted(ADAPTIVE))
def test_adaptive_avg_pool(name):
    fn, x = ADAPTIVE[name]
    graph = check(fn, x)
    assert "extern" not in ops(graph)

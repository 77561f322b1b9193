"""Pooling backward as generated code: avg_pool2d_backward and max_pool2d_with_indices_backward
lower to a gather over the output windows that can cover each input point (lower_pool_backward.py).

The op-level tests compile the backward op's ATen graph through every pipec stage (Triton's
interpreter on CPU) and compare with eager, over geometries that exercise each mask: padding,
stride != kernel (overlapping windows and gaps), ceil_mode's overhanging last window, dilation,
count_include_pad and divisor_override. _adaptive_avg_pool2d_backward (and its 3-D form)
is checked over input/output size pairs of each window layout; so is adaptive_max_pool2d (its
values and int64 indices, with ties and NaNs) and its backward. The training tests check that
tiny CNNs with MaxPool2d and AvgPool2d, AdaptiveAvgPool2d or AdaptiveMaxPool2d, get eager's
gradients with the pooling ops generated.
"""

import copy

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx
from torch.nn import functional as F

import pipec

aten = torch.ops.aten

# (kernel, stride, padding, ceil_mode)
GEOMETRIES = {
    "k2s2": ((2, 2), (2, 2), (0, 0), False),
    "k3s2p1-overlap": ((3, 3), (2, 2), (1, 1), False),
    "k3x2s1x2p1x0-ceil": ((3, 2), (1, 2), (1, 0), True),
    "k2x3s3x2p0x1-gaps-ceil": ((2, 3), (3, 2), (0, 1), True),
    "k3s2p1-ceil": ((3, 3), (2, 2), (1, 1), True),
}


def _compile_and_run(fn, inputs):
    """fn's ATen graph through every pipec stage: (outputs, graph stats)."""
    session = pipec.Session()
    gm = make_fx(fn, tracing_mode="fake")(*inputs)
    run = pipec.compile_graph(gm, inputs, session=session, name="pool_backward")
    return run(list(inputs)), session.graphs[0]


def _check(fn, inputs):
    (got,), stats = _compile_and_run(fn, inputs)
    assert stats.extern_ops == [], stats.extern_ops  # generated code, no fallback to torch
    assert stats.kernel_count > 0
    torch.testing.assert_close(got, fn(*inputs))


@pytest.mark.parametrize("count_include_pad,divisor_override", [(True, None), (False, None), (True, 5)],
                         ids=["include_pad", "exclude_pad", "divisor5"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_avg_pool2d_backward_matches_eager(geometry, count_include_pad, divisor_override):
    kernel, stride, padding, ceil_mode = GEOMETRIES[geometry]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 6)
    grad = torch.randn_like(aten.avg_pool2d(x, kernel, stride, padding, ceil_mode, count_include_pad,
                                            divisor_override))

    def backward(g, x):
        return aten.avg_pool2d_backward(g, x, kernel, stride, padding, ceil_mode, count_include_pad,
                                        divisor_override)

    _check(backward, (grad, x))


@pytest.mark.parametrize("dilation", [(1, 1), (2, 1)], ids=["dense", "dilated"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_max_pool2d_with_indices_backward_matches_eager(geometry, dilation):
    kernel, stride, padding, ceil_mode = GEOMETRIES[geometry]
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 6)
    x[0, 0, :3, :3] = 1.0  # ties: a window's first maximum wins, as in eager's forward
    out, indices = aten.max_pool2d_with_indices(x, kernel, stride, padding, dilation, ceil_mode)
    grad = torch.randn_like(out)

    def backward(g, x, indices):
        return aten.max_pool2d_with_indices_backward(g, x, kernel, stride, padding, dilation, ceil_mode, indices)

    _check(backward, (grad, x, indices))


def test_max_pool_backward_sums_the_windows_that_share_a_maximum():
    """Overlapping windows (stride 1) that all pick one large input send it every gradient."""
    x = torch.zeros(1, 1, 4, 4)
    x[0, 0, 1, 1] = 5.0
    out, indices = aten.max_pool2d_with_indices(x, [3, 3], [1, 1], [1, 1], [1, 1], False)
    grad = torch.arange(1.0, 1.0 + out.numel()).reshape(out.shape)

    def backward(g, x, indices):
        return aten.max_pool2d_with_indices_backward(g, x, [3, 3], [1, 1], [1, 1], [1, 1], False, indices)

    (got,), _ = _compile_and_run(backward, (grad, x, indices))
    torch.testing.assert_close(got, backward(grad, x, indices))
    assert got[0, 0, 1, 1] == grad[0, 0, :3, :3].sum()  # the 9 windows around (1, 1) all picked it


def test_unbatched_input_and_3d_pooling_backward():
    torch.manual_seed(0)
    x = torch.randn(2, 5, 5)  # (C, H, W): no batch dim
    grad = torch.randn_like(aten.avg_pool2d(x, [2, 2], [1, 1], [1, 1], True, False))
    _check(lambda g, x: aten.avg_pool2d_backward(g, x, [2, 2], [1, 1], [1, 1], True, False, None), (grad, x))
    v = torch.randn(1, 2, 4, 5, 3)
    out, indices = aten.max_pool3d_with_indices(v, [2, 2, 2], [2, 1, 2], [1, 0, 1], [1, 1, 1], True)
    grad = torch.randn_like(out)
    _check(lambda g, v, i: aten.max_pool3d_with_indices_backward(g, v, [2, 2, 2], [2, 1, 2], [1, 0, 1], [1, 1, 1],
                                                                  True, i), (grad, v, indices))


class PoolCNN(torch.nn.Module):
    """conv -> ReLU -> MaxPool2d (overlapping, padded, ceil_mode) -> conv -> AvgPool2d -> linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool1 = torch.nn.MaxPool2d(3, stride=2, padding=1, ceil_mode=True)
        self.conv2 = torch.nn.Conv2d(4, 4, 3, padding=1)
        self.pool2 = torch.nn.AvgPool2d(2, stride=2, padding=1, count_include_pad=False)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        x = self.pool1(F.relu(self.conv1(x)))
        x = self.pool2(F.relu(self.conv2(x)))
        return self.fc(x.flatten(1))


def _assert_trains_like_eager_without_pool_externs(eager, images, labels):
    """One backward through pipec.compile: parameter gradients equal eager's, and no pooling op of
    the forward or backward graph runs as an extern."""
    torch.manual_seed(0)
    model = copy.deepcopy(eager)
    compiled = pipec.compile(model)
    for m in (eager, compiled):
        F.cross_entropy(m(images), labels).backward()
    torch.testing.assert_close({n: p.grad for n, p in model.named_parameters()},
                               {n: p.grad for n, p in eager.named_parameters()})
    graphs = {g.kind: g for g in compiled.pipec_session.graphs}
    assert set(graphs) == {"forward", "backward"}
    pool_externs = [op for g in graphs.values() for op, _ in g.extern_ops if "pool" in op]
    assert pool_externs == [], pool_externs


def test_cnn_with_max_and_avg_pooling_gets_eager_gradients():
    torch.manual_seed(0)
    _assert_trains_like_eager_without_pool_externs(PoolCNN(), torch.randn(2, 3, 9, 9), torch.tensor([1, 3]))


# ------------------------------------------------------------ adaptive average pooling backward

# (input size, output size) per spatial dim: one of each kind of window layout
ADAPTIVE_SIZES = {
    "uneven": ((7, 6), (3, 4)),          # O does not divide I: windows of unequal length that overlap
    "identity": ((5, 5), (5, 5)),        # O == I: every window is one point
    "upsample": ((3, 4), (7, 9)),        # O > I: an input point is covered by up to ceil(O/I) + 1 cells
    "global": ((6, 5), (1, 1)),          # O == 1: one window over the whole plane
    "divisible-mixed": ((8, 5), (4, 7)),  # back-to-back equal windows along H, O > I along W
}


@pytest.mark.parametrize("name", sorted(ADAPTIVE_SIZES))
def test_adaptive_avg_pool2d_backward_matches_eager(name):
    size, out = ADAPTIVE_SIZES[name]
    torch.manual_seed(0)
    x = torch.randn(2, 3, *size)
    grad = torch.randn(2, 3, *out)
    _check(lambda g, x: aten._adaptive_avg_pool2d_backward(g, x), (grad, x))


def test_adaptive_avg_pool_unbatched_and_3d():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 7)  # (C, H, W): no batch dim
    _check(lambda g, x: aten._adaptive_avg_pool2d_backward(g, x), (torch.randn(3, 2, 10), x))
    v = torch.randn(1, 2, 4, 5, 3)
    _check(lambda v: aten._adaptive_avg_pool3d(v, [3, 7, 2]), (v,))  # the forward, uneven in every dim
    _check(lambda g, v: aten._adaptive_avg_pool3d_backward(g, v), (torch.randn(1, 2, 3, 7, 1), v))


def test_adaptive_avg_pool_backward_spreads_each_cell_over_its_window():
    """A one-hot grad_output: grad_input is 1/|window| on exactly that cell's window (sizes 5 -> 3)."""
    x = torch.zeros(1, 1, 5, 5)
    grad = torch.zeros(1, 1, 3, 3)
    grad[0, 0, 1, 2] = 1.0  # cell (1, 2) covers rows [1, 4) and columns [3, 5)
    (got,), _ = _compile_and_run(lambda g, x: aten._adaptive_avg_pool2d_backward(g, x), (grad, x))
    expected = torch.zeros(1, 1, 5, 5)
    expected[0, 0, 1:4, 3:5] = 1.0 / 6
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("case", ["avg2d-k10x9-out2x2", "avg2d-divisor", "avg3d-global", "adaptive-global",
                                  "unbatched", "ceil-window-past-the-map", "ceil-exclude-pad", "ceil-one-dim",
                                  "ceil-divisor"])
def test_large_windows_that_tile_the_input_are_one_reduction(case):
    """Windows of more than MAX_TAPS taps placed back to back over the whole input (a global
    pool over a large feature map), or one window longer than the map under ceil_mode (as
    EfficientNet's pooler: a 1280-wide window over 7 x 7), lower to one reduction, not an extern."""
    torch.manual_seed(0)
    fn, x = {
        "avg2d-k10x9-out2x2": (lambda x: aten.avg_pool2d(x, [10, 9], [10, 9]), torch.randn(2, 3, 20, 18)),
        "avg2d-divisor": (lambda x: aten.avg_pool2d(x, [12, 12], [], [0, 0], False, True, 7),
                          torch.randn(1, 2, 12, 24)),
        "avg3d-global": (lambda x: aten.avg_pool3d(x, [4, 5, 6]), torch.randn(2, 2, 4, 5, 6)),
        "adaptive-global": (lambda x: aten._adaptive_avg_pool2d(x, [1, 1]), torch.randn(2, 3, 13, 11)),
        "unbatched": (lambda x: aten.avg_pool2d(x, [9, 9]), torch.randn(3, 18, 9)),
        "ceil-window-past-the-map": (lambda x: aten.avg_pool2d(x, [1280, 1280], [], [0, 0], True),
                                     torch.randn(2, 3, 7, 7)),
        "ceil-exclude-pad": (lambda x: aten.avg_pool2d(x, [40, 40], [], [0, 0], True, False),
                             torch.randn(2, 3, 5, 9)),
        "ceil-one-dim": (lambda x: aten.avg_pool2d(x, [100, 4], [100, 4], [0, 0], True),
                         torch.randn(2, 3, 7, 12)),
        "ceil-divisor": (lambda x: aten.avg_pool2d(x, [30, 30], [], [0, 0], True, True, 3),
                         torch.randn(1, 2, 6, 4)),
    }[case]
    _check(fn, (x,))


def test_efficientnets_pooler_trains_without_externs():
    """nn.AvgPool2d(1280, ceil_mode=True) over a 7x7 map (transformers' EfficientNet pooler):
    forward and backward generated, gradients as eager's."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AvgPool2d(1280, ceil_mode=True), torch.nn.Flatten(), torch.nn.Linear(4, 5))
    _assert_trains_like_eager_without_pool_externs(model, torch.randn(2, 3, 7, 7), torch.tensor([1, 3]))


def test_a_pool_over_a_large_map_trains_without_externs():
    """A 6x12 window (72 taps) over 12x12 maps: the forward's reduction and the backward's
    gather, one window per input point, both generated."""
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.AvgPool2d((6, 12)), torch.nn.Flatten(), torch.nn.Linear(8, 5))
    _assert_trains_like_eager_without_pool_externs(model, torch.randn(2, 3, 12, 12), torch.tensor([1, 3]))


class AdaptiveCNN(torch.nn.Module):
    """conv -> ReLU -> an adaptive pooling (uneven windows, 7x7 -> 3x2) -> linear."""

    def __init__(self, pool=torch.nn.AdaptiveAvgPool2d) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.pool = pool((3, 2))
        self.fc = torch.nn.Linear(4 * 3 * 2, 5)

    def forward(self, x):
        return self.fc(self.pool(F.relu(self.conv(x))).flatten(1))


def test_cnn_with_adaptive_avg_pooling_gets_eager_gradients():
    torch.manual_seed(0)
    _assert_trains_like_eager_without_pool_externs(AdaptiveCNN(), torch.randn(2, 3, 7, 7), torch.tensor([0, 4]))


# ------------------------------------------------------------ adaptive max pooling (forward and backward)


def _adaptive_max_input(size, fill):
    """A (2, 3, *size) input: random, integer-valued (ties inside windows) or with NaNs."""
    torch.manual_seed(0)
    if fill == "ties":
        return torch.randint(0, 3, (2, 3, *size)).float()
    x = torch.randn(2, 3, *size)
    if fill == "nan":
        x.view(-1)[::7] = float("nan")  # several NaNs per plane, some sharing a window
    return x


@pytest.mark.parametrize("fill", ["random", "ties", "nan"])
@pytest.mark.parametrize("name", sorted(ADAPTIVE_SIZES))
def test_adaptive_max_pool2d_matches_eager_values_and_indices(name, fill):
    size, out = ADAPTIVE_SIZES[name]
    x = _adaptive_max_input(size, fill)
    (values, indices), stats = _compile_and_run(lambda x: aten.adaptive_max_pool2d(x, out), (x,))
    assert stats.extern_ops == [], stats.extern_ops
    want_values, want_indices = aten.adaptive_max_pool2d(x, out)
    torch.testing.assert_close(values, want_values, equal_nan=True)
    assert indices.dtype == torch.int64
    assert torch.equal(indices, want_indices)  # the first maximum (or eager's NaN) in window order


@pytest.mark.parametrize("fill", ["random", "ties"])
@pytest.mark.parametrize("name", sorted(ADAPTIVE_SIZES))
def test_adaptive_max_pool2d_backward_matches_eager(name, fill):
    size, out = ADAPTIVE_SIZES[name]
    x = _adaptive_max_input(size, fill)
    _, indices = aten.adaptive_max_pool2d(x, out)
    grad = torch.randn(2, 3, *out)
    _check(lambda g, x, i: aten.adaptive_max_pool2d_backward(g, x, i), (grad, x, indices))


def test_adaptive_max_pool_backward_sums_the_cells_that_share_a_maximum():
    """Upsampling 3 -> 5 overlaps cells: a large input picked by several cells gets all their gradients."""
    x = torch.zeros(1, 1, 3, 3)
    x[0, 0, 1, 1] = 5.0  # the middle point: cells 1..3 along each dim cover it
    _, indices = aten.adaptive_max_pool2d(x, [5, 5])
    grad = torch.arange(1.0, 26.0).reshape(1, 1, 5, 5)
    (got,), _ = _compile_and_run(lambda g, x, i: aten.adaptive_max_pool2d_backward(g, x, i), (grad, x, indices))
    torch.testing.assert_close(got, aten.adaptive_max_pool2d_backward(grad, x, indices))
    assert got[0, 0, 1, 1] == grad[0, 0, 1:4, 1:4].sum()


def test_adaptive_max_pool_unbatched_and_3d():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 7)  # (C, H, W): no batch dim
    (values, indices), stats = _compile_and_run(lambda x: aten.adaptive_max_pool2d(x, [2, 10]), (x,))
    assert stats.extern_ops == [], stats.extern_ops
    want_values, want_indices = aten.adaptive_max_pool2d(x, [2, 10])
    torch.testing.assert_close(values, want_values)
    assert torch.equal(indices, want_indices)
    _check(lambda g, x, i: aten.adaptive_max_pool2d_backward(g, x, i), (torch.randn(3, 2, 10), x, want_indices))
    v = torch.randint(0, 3, (1, 2, 4, 5, 3)).float()  # ties
    (values, indices), stats = _compile_and_run(lambda v: aten.adaptive_max_pool3d(v, [3, 7, 2]), (v,))
    assert stats.extern_ops == [], stats.extern_ops
    want_values, want_indices = aten.adaptive_max_pool3d(v, [3, 7, 2])
    torch.testing.assert_close(values, want_values)
    assert torch.equal(indices, want_indices)
    _check(lambda g, v, i: aten.adaptive_max_pool3d_backward(g, v, i), (torch.randn(1, 2, 3, 7, 2), v, want_indices))


def test_cnn_with_adaptive_max_pooling_gets_eager_gradients():
    torch.manual_seed(0)
    _assert_trains_like_eager_without_pool_externs(AdaptiveCNN(torch.nn.AdaptiveMaxPool2d), torch.randn(2, 3, 7, 7), torch.tensor([2, 1]))

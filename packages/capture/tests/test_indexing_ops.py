"""Indexing and layout ops lowered through `take` (docs/IR.md): IR evaluated by the reference interpreter."""

import pytest
import torch
import torch.nn.functional as F

from test_ops import check, ops

g = torch.Generator().manual_seed(1)
X = torch.randn(4, 6, generator=g)
Y = torch.randn(3, 6, generator=g)
IDX = torch.tensor([[0, 3, 1, 1, 2, 0], [3, 3, 0, 1, 2, 2]])
ROWS = torch.tensor([2, -1, 0])
W = torch.randn(7, 5, generator=g)
TOKENS = torch.tensor([[1, 6, 0], [2, 2, 5]])
IMAGE = torch.randn(2, 3, 5, 7, generator=g)
GRID = torch.rand(2, 4, 6, 2, generator=g) * 2.4 - 1.2  # some points outside the image

CASES = {
    "gather": (lambda x, i: torch.gather(x, 0, i), X, IDX),
    "index_select": (lambda x, i: torch.index_select(x, 1, i), X, torch.tensor([5, 0, 2])),
    "embedding": (lambda w, t: F.embedding(t, w), W, TOKENS),
    "index_negative": (lambda x, r: x[r], X, ROWS),
    "index_two_apart": (lambda x, r: x.reshape(2, 2, 6)[r[:2].clamp(0, 1), :, r[1:].clamp(0, 5)], X, ROWS),
    "cat_promotes": (lambda x, y: torch.cat([x, y.to(torch.float16), x[:1]], 0), X, Y),
    "cat_dim1": (lambda x: torch.cat([x, x * 2], 1), X),
    "pad": (lambda x: F.pad(x, (1, 2, 0, 3), value=-1.5), X),
    "pad_crop": (lambda x: F.pad(x, (-1, 2, 0, -1)) + F.pad(x, (0, -2, -1, 0)).sum(), X),
    "flip": (lambda x: x.flip(0, 1), X),
    "slice_scatter": (lambda x: torch.slice_scatter(x, x[:, :3] * 3, 1, 1, 6, 2), X),
    "select_scatter": (lambda x: torch.select_scatter(x, x[1] * 10, 0, -2), X),
    "diagonal": (lambda x: torch.diagonal(x, 1) + 1, X),
    # overlapping windows (step < size) along the last dim, strided ones along the first, and
    # windows of a transposed value (its row-major IR value, not eager's storage, is read)
    "unfold": (lambda x: x.unfold(1, 3, 2) * 2 + x.t().unfold(1, 2, 1).sum(-1)[:4, :2, None], X),
    "unfold_rows": (lambda x: x.unfold(0, 2, 2).unfold(1, 4, 1) - 1, X),
    # torch's decomposition (aot.DECOMPOSE_CORE): its corner pixels gathered with their weights
    "grid_sample": (lambda x, p: F.grid_sample(x, p, align_corners=False), IMAGE, GRID),
    "grid_sample_bicubic": (lambda x, p: F.grid_sample(x, p, mode="bicubic", padding_mode="reflection",
                                                       align_corners=True), IMAGE, GRID),
    "grid_sample_nearest": (lambda x, p: F.grid_sample(x, p, mode="nearest", padding_mode="border"), IMAGE, GRID),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_take_lowering(name):
    fn, *inputs = CASES[name]
    graph = check(fn, *inputs)
    assert "take" in ops(graph) or name == "select_scatter"
    assert "extern" not in ops(graph)


def test_gather_lowers_with_symbolic_sizes():
    """A gather under dynamic shapes (a loss's nll_loss over a batch of any size) is a `take` at
    positions computed from size expressions, not an extern, and right at another size."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(x, i):
        return torch.gather(x * 2, 1, i) + torch.gather(x, 0, i.t()[:, :1].expand(1, 3))

    g = torch.Generator().manual_seed(5)
    x, i = torch.randn(6, 5, generator=g), torch.randint(0, 5, (6, 1), generator=g)
    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(x, i)
    graph = lower_graph(gm, name="t")
    assert "take" in [n.op for n in graph.nodes] and "extern" not in [n.op for n in graph.nodes] and graph.symbols
    x, i = torch.randn(9, 7, generator=g), torch.randint(0, 7, (9, 1), generator=g)
    (got,) = run_graph(graph, [x, i])
    torch.testing.assert_close(got, fn(x, i))


@pytest.mark.parametrize("name", ["embedding", "index_select"])
def test_row_lookups_lower_with_symbolic_sizes(name):
    """embedding and index_select over a symbolic number of indices (a batch and sequence of any
    size) lower to `take`, not externs, and are right at another size."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(w, i):
        if name == "embedding":
            return torch.nn.functional.embedding(i, w) * 2
        return torch.index_select(w, 0, i.flatten()) + 1

    g = torch.Generator().manual_seed(6)
    w = torch.randn(11, 4, generator=g)
    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(
        w, torch.randint(0, 11, (2, 3), generator=g))
    graph = lower_graph(gm, name="t")
    assert "take" in [n.op for n in graph.nodes] and "extern" not in [n.op for n in graph.nodes] and graph.symbols
    i = torch.randint(0, 11, (3, 5), generator=g)
    (got,) = run_graph(graph, [w, i])
    torch.testing.assert_close(got, fn(w, i))


def test_cat_lowers_with_symbolic_sizes():
    """A KV-cache concat (past of a symbolic length, one new step) and a class token before a
    symbolic sequence lower to `take`s and `where`s, not an extern, right at other sizes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(past, new, cls):
        kv = torch.cat([past, new], dim=1)
        return kv, torch.cat([cls.expand(past.shape[0], 1, 4), kv], dim=1) * 2

    g = torch.Generator().manual_seed(7)
    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(
        torch.randn(2, 5, 4, generator=g), torch.randn(2, 1, 4, generator=g), torch.randn(1, 1, 4, generator=g))
    graph = lower_graph(gm, name="t")
    assert "extern" not in [n.op for n in graph.nodes] and graph.symbols
    inputs = [torch.randn(3, 8, 4, generator=g), torch.randn(3, 1, 4, generator=g), torch.randn(1, 1, 4, generator=g)]
    for got, want in zip(run_graph(graph, inputs), fn(*inputs)):
        torch.testing.assert_close(got, want)


def test_a_cat_part_that_may_be_empty_is_written_part_by_part():
    """A part sized by a difference of sizes (it may be 0 at run time) would be read out of bounds
    by the clamped gather: that cat writes each part at its place instead (one scatter per part over
    the part's own points, so an empty one reads nothing), right when the part is empty too."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(a, b):
        return torch.cat([a * 2, b[: b.shape[0] - a.shape[0]] + 1, a], dim=0)

    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(torch.randn(3, 2), torch.randn(7, 2))
    graph = lower_graph(gm, name="t")
    ops = [n.op for n in graph.nodes]
    assert "extern" not in ops and ops.count("scatter") == 3
    g = torch.Generator().manual_seed(3)
    for rows_a, rows_b in ((3, 7), (4, 4), (2, 9)):  # (4, 4): the middle part is empty
        inputs = [torch.randn(rows_a, 2, generator=g), torch.randn(rows_b, 2, generator=g)]
        (got,) = run_graph(graph, inputs)
        torch.testing.assert_close(got, fn(*inputs))


def test_slice_scatter_lowers_with_symbolic_sizes():
    """The backward of slicing a sequence (`x[:, 1:]`, `x[:, ::2]`) and of selecting its last
    position at a symbolic length writes into zeros (or x) with `where`, not an extern, and is
    right at another length."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(x, tail, even):
        zeros = torch.zeros_like(x)
        return (torch.slice_scatter(zeros, tail, 1, 1, x.shape[1]),
                torch.slice_scatter(x, even * 2, 1, 0, x.shape[1], 2),
                torch.select_scatter(x, x[:, -1] * 3, 1, -1))

    g = torch.Generator().manual_seed(8)

    def inputs(n):
        x = torch.randn(2, n, generator=g)
        return [x, torch.randn(2, n - 1, generator=g), torch.randn(2, (n + 1) // 2, generator=g)]

    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(*inputs(7))
    graph = lower_graph(gm, name="t")
    assert "extern" not in [n.op for n in graph.nodes] and graph.symbols
    for n in (7, 10):
        args = inputs(n)
        for got, want in zip(run_graph(graph, args), fn(*args)):
            torch.testing.assert_close(got, want)


def test_pad_lowers_with_symbolic_sizes():
    """A sequence padded up to another's length (a pad that is a difference of sizes, 0 included)
    and a fixed pad of a symbolic sequence lower to `take` and `where`, not an extern."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(x, longer):
        return F.pad(x, (0, longer.shape[1] - x.shape[1]), value=-1.0) + longer, F.pad(x, (2, 1, 1, 0))

    g = torch.Generator().manual_seed(9)
    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(
        torch.randn(3, 5, generator=g), torch.randn(3, 8, generator=g))
    graph = lower_graph(gm, name="t")
    assert "extern" not in [n.op for n in graph.nodes] and graph.symbols
    for n, m in ((5, 8), (7, 7), (4, 11)):
        args = [torch.randn(3, n, generator=g), torch.randn(3, m, generator=g)]
        for got, want in zip(run_graph(graph, args), fn(*args)):
            torch.testing.assert_close(got, want)


def test_index_lowers_with_symbolic_sizes():
    """Advanced indexing at symbolic sizes (rows picked by position ids, negative ones
    included; two index tensors broadcast together) is a `take`, not an extern, and right at
    other sizes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(x, rows, cols):
        return x[rows] * 2, x[:, cols[0]], x[rows[:, None], cols[1][None, :]] + 1

    g = torch.Generator().manual_seed(10)

    def inputs(n, m, k):
        return [torch.randn(n, m, generator=g), torch.randint(-n, n, (k,), generator=g),
                torch.randint(0, m, (3, k), generator=g)]

    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(*inputs(5, 7, 4))
    graph = lower_graph(gm, name="t")
    assert "take" in [n.op for n in graph.nodes] and "extern" not in [n.op for n in graph.nodes] and graph.symbols
    for n, m, k in ((5, 7, 4), (8, 6, 9)):
        args = inputs(n, m, k)
        for got, want in zip(run_graph(graph, args), fn(*args)):
            torch.testing.assert_close(got, want)

"""The scatter family lowered to `scatter` (docs/IR.md): IR evaluated by the reference interpreter."""

import pytest
import torch

from test_ops import check, ops

g = torch.Generator().manual_seed(4)
X = torch.randn(5, 6, generator=g)
SRC = torch.randn(4, 6, generator=g)
DUP = torch.randint(0, 5, (4, 6), generator=g)
UNIQUE = torch.stack([torch.randperm(5, generator=g)[:4] for _ in range(6)], 1)
ROWS = torch.tensor([0, 3, 0, -1, 3])
COLS = torch.tensor([5, -6, 2])
GRAD = torch.randn(2, 3, 5, generator=g)
TOKENS = torch.tensor([[1, 2, 1], [6, 1, 0]])
aten = torch.ops.aten

CASES = {
    "scatter_src": (lambda x, s, i: torch.scatter(x, 0, i, s), X, SRC, UNIQUE),
    "scatter_value": (lambda x, i: torch.scatter(x, -2, i, 2.5), X, UNIQUE),
    "scatter_add": (lambda x, s, i: torch.scatter_add(x, 0, i, s), X, SRC, DUP),
    "scatter_add_last_dim": (lambda x, s, i: torch.scatter_add(x, -1, i.clamp(max=3) + 1, s), X, SRC, DUP),
    "scatter_add_int": (lambda x, i: torch.scatter_add(x.to(torch.int16), 0, i, i.to(torch.int16)), X, DUP),
    "scatter_add_half": (lambda x, s, i: torch.scatter_add(x.half(), 0, i, s.half()), X, SRC, DUP),
    "legacy_reduce_add": (lambda x, s, i: torch.scatter(x, 0, i, s, reduce="add"), X, SRC, DUP),
    "reduce_amax": (lambda x, s, i: x.scatter_reduce(0, i, s, "amax"), X, SRC, DUP),
    "reduce_amin_exclude_self": (lambda x, s, i: x.scatter_reduce(0, i, s, "amin", include_self=False), X, SRC, DUP),
    "reduce_sum_exclude_self": (lambda x, s, i: x.scatter_reduce(0, i, s, "sum", include_self=False), X, SRC, DUP),
    "reduce_mean": (lambda x, s, i: x.scatter_reduce(0, i, s, "mean"), X, SRC, DUP),
    "reduce_mean_exclude_self": (lambda x, s, i: x.scatter_reduce(0, i, s, "mean", include_self=False), X, SRC, DUP),
    "index_put_accumulate": (lambda x, s, r: aten.index_put(x, [r], s[0], True), X, SRC, ROWS),
    "index_put_two_indices": (lambda x, s, r, c: aten.index_put(x, [r[:3], c], s[0, 0], True), X, SRC, ROWS, COLS),
    "index_put_apart": (lambda x, s, c: aten.index_put(x.reshape(5, 2, 3), [None, None, c[1:].clamp(-3, 2)], s[0, :2]), X, SRC, COLS),
    "index_put_unique": (lambda x, s, r: aten.index_put(x, [r[1:4]], s[:3]), X, SRC, ROWS),
    "embedding_backward_padding": (lambda g_, t: aten.embedding_dense_backward(g_, t, 7, 2, False), GRAD, TOKENS),
    "embedding_backward_by_freq": (lambda g_, t: aten.embedding_dense_backward(g_, t, 7, -1, True), GRAD, TOKENS),
    # every other column of rows 1-2; and through a transposed value, whose storage eager's
    # strides address (its row-major IR value is written at the decoded points)
    "as_strided_scatter": (lambda x, s: torch.as_strided_scatter(x * 2, s[:2, :3], (2, 3), (6, 2), 7), X, SRC),
    "as_strided_scatter_transposed": (lambda x, s: torch.as_strided_scatter(x.t() + 1, s[:3, :2], (3, 2), (5, 1), 6),
                                      X, SRC),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_scatter_lowering(name):
    fn, *inputs = CASES[name]
    graph = check(fn, *inputs)
    assert "scatter" in ops(graph)
    assert "extern" not in ops(graph)


@pytest.mark.parametrize("fn", [
    lambda x, s, i: x.scatter_reduce(0, i, s, "prod"),  # no atomic multiply
    lambda x, s, i: aten.index_put(x, [x[:, 0] > 0], s[0, 0]),  # a mask: data-dependent positions
    lambda x, s, i: torch.as_strided_scatter(x, s[:2, :3], (2, 3), (2, 1), 0),  # rows overlap: no one answer
], ids=["prod", "bool_mask", "overlapping_view"])
def test_what_stays_extern(fn):
    graph = check(fn, X, SRC, DUP)
    assert "extern" in ops(graph) and "scatter" not in ops(graph)


ONE_PER_ROW = torch.randint(0, 6, (5, 1), generator=g)
ONE_PER_COLUMN = torch.randint(0, 5, (1, 6), generator=g)
SELECTS = {
    # nll_loss_backward: -1 written into zeros of the logits' shape at each row's target
    "nll_backward": (lambda x, i: torch.scatter(torch.zeros_like(x), 1, i, -1.0), X, ONE_PER_ROW),
    "src_per_row": (lambda x, s, i: torch.scatter(x, -1, i, s[:, :1]), X, torch.randn(5, 6, generator=g), ONE_PER_ROW),
    "add_per_column": (lambda x, s, i: torch.scatter_add(x, 0, i, s[:1]), X, SRC, ONE_PER_COLUMN),
    "half_per_row": (lambda x, i: torch.scatter(x.half(), 1, i, 0.5), X, ONE_PER_ROW),
}


@pytest.mark.parametrize("name", sorted(SELECTS))
def test_one_write_per_line_lowers_to_pointwise_math(name):
    """An index with one element along the scattered dim (and self's size elsewhere) writes each
    line once: it lowers to where(coordinate == index, value, self), which fuses with its
    readers, and matches eager."""
    fn, *inputs = SELECTS[name]
    graph = check(fn, *inputs)
    assert "scatter" not in ops(graph) and "where" in ops(graph)


def test_one_write_per_line_lowers_with_symbolic_sizes():
    """nll_loss_backward's scatter under dynamic shapes (rows a symbol): still pointwise math, not
    an extern, and right at a size other than the traced one."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(x, i):
        return torch.scatter(torch.zeros_like(x), 1, i, -1.0) * x

    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(X, ONE_PER_ROW)
    graph = lower_graph(gm, name="t")
    assert "scatter" not in ops(graph) and "extern" not in ops(graph) and graph.symbols
    x, i = torch.randn(7, 6, generator=g), torch.randint(0, 6, (7, 1), generator=g)
    (got,) = run_graph(graph, [x, i])
    torch.testing.assert_close(got, fn(x, i))


@pytest.mark.parametrize("by_freq", [False, True], ids=["plain", "scale_grad_by_freq"])
def test_embedding_backward_lowers_with_symbolic_sizes(by_freq):
    """embedding_dense_backward over a symbolic number of tokens (training under dynamic shapes):
    an atomic scatter-add at positions from size expressions, not an extern, right at another size."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(grad, tokens):
        return aten.embedding_dense_backward(grad, tokens, 7, 2, by_freq)

    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(GRAD, TOKENS)
    graph = lower_graph(gm, name="t")
    assert "scatter" in ops(graph) and "extern" not in ops(graph) and graph.symbols
    grad, tokens = torch.randn(3, 4, 5, generator=g), torch.randint(0, 7, (3, 4), generator=g)
    (got,) = run_graph(graph, [grad, tokens])
    torch.testing.assert_close(got, fn(grad, tokens))


SYMBOLIC = {
    # a detector's backward: gradients summed into a box count a symbol sizes, src larger than the index
    "scatter_add": lambda x, s, i: torch.scatter_add(x, 0, i, s),
    "scatter_add_larger_src": lambda x, s, i: torch.scatter_add(x, 0, i[:2], s),
    "reduce_amax": lambda x, s, i: x.scatter_reduce(0, i, s, "amax"),
    "reduce_mean": lambda x, s, i: x.scatter_reduce(0, i, s, "mean", include_self=False),
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC))
def test_scatter_lowers_with_symbolic_sizes(name):
    """scatter_add / scatter_reduce with several writes per line at symbolic sizes: an atomic
    scatter at positions from size expressions, not an extern, and right at sizes other than the
    traced ones."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    fn = SYMBOLIC[name]
    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="symbolic")(X, SRC, DUP)
    graph = lower_graph(gm, name="t")
    assert "scatter" in ops(graph) and "extern" not in ops(graph) and graph.symbols
    for rows, cols in ((7, 3), (9, 8)):
        x, s = torch.randn(rows, cols, generator=g), torch.randn(rows - 1, cols, generator=g)
        i = torch.randint(0, rows, (rows - 1, cols), generator=g)  # duck-sized as src (both 4 when traced)
        (got,) = run_graph(graph, [x, s, i])
        torch.testing.assert_close(got, fn(x, s, i))

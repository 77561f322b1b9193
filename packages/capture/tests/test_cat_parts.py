"""Cat parts that are pointwise math run at the gathered points (cat_parts.py): the rotary
embedding's rotate_half no longer makes a value that only a gather reads."""

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from pipec_capture import core_decompositions, lower_graph
from pipec_capture.reference import run_graph


def _lower(fn, *args):
    return lower_graph(make_fx(fn, decomposition_table=core_decompositions())(*args), name="t")


def _taken(graph) -> list[str]:
    """The ops of the nodes whose values a `take` reads (through views)."""
    nodes = {n.name: n for n in graph.nodes}
    out = []
    for n in graph.nodes:
        if n.op == "take":
            src = nodes.get(n.inputs[0])
            while src is not None and src.op in ("reshape", "permute", "expand", "slice", "select"):
                src = nodes.get(src.inputs[0])
            out.append(src.op if src is not None else "input")
    return out


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def test_rotate_half_gathers_its_input_not_the_negation():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=g)
    graph = _lower(rotate_half, x)
    assert _taken(graph) == ["input", "input"]  # the negation runs on the gathered values
    (got,) = run_graph(graph, [x])
    torch.testing.assert_close(got, rotate_half(x))


def test_rotary_embedding_of_a_projection():
    """Llama's apply_rotary_pos_emb after a q projection, in bf16 casts: right, and the cat reads
    the matmul's result (no negated copy stored for it)."""
    g = torch.Generator().manual_seed(1)
    x, w = torch.randn(4, 16, generator=g), torch.randn(16, 16, generator=g)
    cos, sin = torch.randn(4, 16, generator=g), torch.randn(4, 16, generator=g)

    def fn(x, w, cos, sin):
        q = (x @ w).view(4, 2, 8).transpose(0, 1)
        c, s = cos.view(4, 2, 8).transpose(0, 1), sin.view(4, 2, 8).transpose(0, 1)
        return q * c + rotate_half(q).to(torch.float16).to(torch.float32) * s

    graph = _lower(fn, x, w, cos, sin)
    assert "neg" not in _taken(graph) and "cast" not in _taken(graph)
    (got,) = run_graph(graph, [x, w, cos, sin])
    torch.testing.assert_close(got, fn(x, w, cos, sin))


def test_parts_that_cannot_move_are_gathered_as_before():
    """A part of two computed full-size operands keeps its gather (moving it would store both);
    row statistics, small beside the cat, move; every result is right."""
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)

    def made(a):
        return torch.cat([torch.arange(12.0).view(3, 4) * 2, a], dim=1)

    def two_computed(a, b):
        return torch.cat([a.cumsum(1) * b.cumsum(1), a], dim=0)

    graph = _lower(made, a)
    (got,) = run_graph(graph, [a])
    torch.testing.assert_close(got, made(a))
    def with_statistics(a, b):
        return torch.cat([(a - a.amax(1, keepdim=True)) * b.sum(1, keepdim=True), a], dim=0)

    graph = _lower(with_statistics, a, b)
    assert "mul" not in _taken(graph)
    (got,) = run_graph(graph, [a, b])
    torch.testing.assert_close(got, with_statistics(a, b))
    graph = _lower(two_computed, a, b)
    assert sorted(_taken(graph)) == ["input", "mul"]  # moved, it would store both running sums
    (got,) = run_graph(graph, [a, b])
    torch.testing.assert_close(got, two_computed(a, b))


def test_scalar_operands_are_rebuilt_at_the_cat_shape():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(2, 3, generator=g)

    def fn(a):
        return torch.cat([a * 3.0 + 1.0, a.to(torch.float64).to(torch.float32)], dim=1)

    graph = _lower(fn, a)
    assert _taken(graph) == ["input", "input"]
    (got,) = run_graph(graph, [a])
    torch.testing.assert_close(got, fn(a))


def partial_rotary(q, cos, sin):
    """GPT-NeoX / Phi: the first `rot` dims rotated, the rest passed through, then one cat."""
    rot = cos.shape[-1]
    q_rot, q_pass = q[..., :rot], q[..., rot:]
    return torch.cat([q_rot * cos + rotate_half(q_rot) * sin, q_pass], dim=-1)


def test_a_partial_rotary_reads_only_its_inputs():
    """Both cats of a partial rotary embedding read the projection and the tables: the inner
    cat's index arithmetic is composed into the outer one's gathers (iota along the cat dim reads
    the outer gather's coordinate), so nothing computed is gathered at all."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 4, 6, 16, generator=g)
    cos, sin = torch.randn(1, 1, 6, 8, generator=g), torch.randn(1, 1, 6, 8, generator=g)
    graph = _lower(partial_rotary, q, cos, sin)
    assert set(_taken(graph)) == {"input"}
    (got,) = run_graph(graph, [q, cos, sin])
    torch.testing.assert_close(got, partial_rotary(q, cos, sin))


def test_a_cat_of_many_parts_gathers_them_as_they_are():
    """Each part is evaluated at every point of the cat's kernel: past MAX_PARTS parts, moving
    their math would repeat it once per part, so they are gathered (and right)."""
    from pipec_capture.cat_parts import MAX_PARTS

    g = torch.Generator().manual_seed(5)
    xs = [torch.randn(2, 3, generator=g) for _ in range(MAX_PARTS + 1)]

    def many(*xs):
        return torch.cat([-x for x in xs], dim=1)

    graph = _lower(many, *xs)
    assert _taken(graph) == ["neg"] * len(xs)
    (got,) = run_graph(graph, xs)
    torch.testing.assert_close(got, many(*xs))

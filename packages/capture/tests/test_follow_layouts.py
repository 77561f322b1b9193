"""Pointwise results stored channels-last when their operands are (follow_layouts.py), on ATen
graphs: which ops are rewritten, which are left, and that the graph computes the same values."""

import torch
from test_sink_gathers import run_graph, targets, traced

from pipec_capture.follow_layouts import follow_layouts

aten = torch.ops.aten


def _inputs(*shapes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g) for s in shapes]


def _add_operands(gm):
    """The operands of every 4-d add of `gm`, as (op target or "input") per add."""
    return [tuple(a.target if a.op == "call_function" else "input" for a in n.args)
            for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.add.Tensor]


def test_a_residual_add_of_two_nhwc_tensors_is_computed_over_nhwc():
    """ConvNeXt's block end: residual' + gamma * mlp' (both permuted NHWC -> NCHW) becomes
    (residual + gamma * mlp)' : the add reads the NHWC tensors and one permute follows it."""
    r, m, gamma = _inputs((2, 5, 6, 8), (2, 5, 6, 8), (8,))

    def block_end(r, m, gamma):
        return r.permute(0, 3, 1, 2) + (gamma * m).permute(0, 3, 1, 2)

    gm = traced(block_end, r, m, gamma)
    before = run_graph(gm, r, m, gamma)
    assert follow_layouts(gm) == 1
    assert _add_operands(gm) == [("input", aten.mul.Tensor)]
    out = [n for n in gm.graph.nodes if n.op == "output"][0].args[0][0]
    assert out.target is aten.permute.default and list(out.args[1]) == [0, 3, 1, 2]
    after = run_graph(gm, r, m, gamma)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    assert after.is_contiguous(memory_format=torch.channels_last)  # as eager lays it out


def test_broadcast_operands_are_permuted_to_match_and_chains_follow():
    """An NCHW broadcast operand ([C, 1, 1]) is unsqueezed and permuted; a second op reading the
    first's result is rewritten in turn (it now reads a permute); scalars stay."""
    x, scale = _inputs((2, 6, 4, 3), (3, 1, 1))

    def chain(x, scale):
        y = x.permute(0, 3, 1, 2) * scale  # [2, 3, 6, 4] * [3, 1, 1]
        return torch.relu(y + 1.5)

    gm = traced(chain, x, scale)
    before = run_graph(gm, x, scale)
    assert follow_layouts(gm) == 3  # mul, add, relu
    assert targets(gm).count(aten.permute.default) == 2  # the scale's, and one after the relu
    torch.testing.assert_close(run_graph(gm, x, scale), before, rtol=0, atol=0)


def test_other_layouts_and_random_ops_stay():
    """Left alone: an add with one row-major NCHW operand (eager's result is row-major too),
    attention's head permute [0, 2, 1, 3], and random ops."""
    a, b = _inputs((2, 4, 4, 3), (2, 3, 4, 4))

    gm = traced(lambda a, b: a.permute(0, 3, 1, 2) + b, a, b)
    assert follow_layouts(gm) == 0

    q, k = _inputs((2, 5, 4, 8), (2, 5, 4, 8), seed=1)
    gm = traced(lambda q, k: q.transpose(1, 2) * 0.5 + k.transpose(1, 2), q, k)
    assert follow_layouts(gm) == 0

    gm = traced(lambda a: torch.nn.functional.dropout(a.permute(0, 3, 1, 2), 0.5, training=True), a)

    def random_ops(gm):
        return [(n.target, tuple(map(str, n.args))) for n in gm.graph.nodes
                if n.op == "call_function" and torch.Tag.nondeterministic_seeded in getattr(n.target, "tags", ())]

    before = random_ops(gm)
    assert before  # the mask's random numbers, drawn in the NCHW view's order
    follow_layouts(gm)
    assert random_ops(gm) == before


def test_a_cat_of_nhwc_parts_along_channels_is_joined_over_nhwc():
    """A UNet's skip connection: cat([h', skip'], dim=1) of two NCHW views of NHWC storage becomes
    cat([h'', skip''], dim=3)' (each part viewed back as NHWC): the parts are read and the result
    written in one order."""
    h, skip = _inputs((2, 4, 5, 6), (2, 4, 5, 3))

    def join(h, skip):
        return torch.cat([h.permute(0, 3, 1, 2), skip.permute(0, 3, 1, 2)], dim=1) * 2

    gm = traced(join, h, skip)
    before = run_graph(gm, h, skip)
    assert follow_layouts(gm) == 2  # the cat, then the mul reading its permute
    cats = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.cat.default]
    assert len(cats) == 1 and cats[0].args[1] == 3
    assert all(p.target is aten.permute.default and list(p.args[1]) == [0, 2, 3, 1] for p in cats[0].args[0])
    after = run_graph(gm, h, skip)
    torch.testing.assert_close(after, before, rtol=0, atol=0)
    assert after.is_contiguous(memory_format=torch.channels_last)


def test_a_cat_with_a_row_major_part_stays():
    """One NCHW row-major part: eager's result is row-major too, and the cat is left as it is."""
    h, skip = _inputs((2, 4, 5, 6), (2, 3, 4, 5))

    def join(h, skip):
        return torch.cat([h.permute(0, 3, 1, 2), skip], dim=1)

    gm = traced(join, h, skip)
    assert follow_layouts(gm) == 0


def _pools(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function" and "max_pool" in str(n.target)]


def test_a_max_pool_of_an_nhwc_tensor_pools_its_storage():
    """ResNet's stem: relu(x') pooled 3 x 3, stride 2, padding 1 becomes
    permute(pipec.max_pool2d_nhwc(relu(x)), TO_NCHW), values and indices; the graph (run by
    the op's eager implementation) computes what it did, and the result is channels-last."""
    (x,) = _inputs((2, 9, 9, 4))
    x[0, :3, :3, 0] = 0.0  # ties, which the indices must break as eager does

    def stem(x):
        values, indices = aten.max_pool2d_with_indices.default(torch.relu(x.permute(0, 3, 1, 2)), [3, 3], [2, 2], [1, 1])
        return values + 1.0, indices

    gm = traced(stem, x)
    before = gm(x)
    assert follow_layouts(gm) == 3  # the relu, the pool and the add after it
    assert _pools(gm) == [torch.ops.pipec.max_pool2d_nhwc.default]
    after = gm(x)
    torch.testing.assert_close(after[0], before[0], rtol=0, atol=0)
    assert torch.equal(after[1], before[1])
    assert after[0].is_contiguous(memory_format=torch.channels_last)


def test_max_pools_the_lowering_cannot_take_over_nhwc_stay():
    """Left as they are: an NCHW input, and a dilated window reaching into the padding (the
    channels-last lowering reads clamped taps, which only an undilated window may)."""
    (x,) = _inputs((2, 9, 9, 4))

    def nchw(x):
        return aten.max_pool2d_with_indices.default(x.permute(0, 3, 1, 2).contiguous(), [3, 3], [2, 2], [1, 1])[0]

    def dilated(x):
        return aten.max_pool2d_with_indices.default(x.permute(0, 3, 1, 2), [3, 3], [1, 1], [1, 1], [2, 2])[0]

    for fn in (nchw, dilated):
        gm = traced(fn, x)
        follow_layouts(gm)
        assert _pools(gm) == [aten.max_pool2d_with_indices.default], fn.__name__

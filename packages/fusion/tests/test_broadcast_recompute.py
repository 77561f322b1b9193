"""Fusion's default policy recomputes a modest pointwise chain read only by a few-times-larger
pointwise consumer (heuristics.py, `few_times_broadcast`): grouped-query attention's repeat_kv."""

from fusion_graphs import GraphBuilder
from pipec_ir import CompileOptions

from pipec_fusion import preset


def fuse(graph):
    return preset("default").fuse(graph, CompileOptions())


def _rejected(plan, first, second) -> list[str]:
    return [r.reason for r in plan.rejected if (r.first, r.second) == (first, second)]


def repeated_heads(factor, other_reader=False, ops=6):
    """Grouped-query attention's repeat_kv: a pointwise chain over [2, 2, 8, 8] (2 key/value
    heads) read through expand + reshape by a clone over `factor` times as many heads."""
    g = GraphBuilder("gqa")
    k = g.input("k", [2, 2, 8, 8])
    v = k
    for i in range(ops):
        v = g.pw(("mul", "add", "exp")[i % 3], v, k) if i % 3 < 2 else g.pw("exp", v)
    rep = g.pw("identity", g.expand(g.reshape(v, [2, 2, 1, 8, 8]), [2, 2, factor, 8, 8]))
    outs = [g.reshape(rep, [2, 2 * factor, 8, 8])]
    if other_reader:
        outs.append(g.pw("neg", v))
    return g.build(*outs)


def test_a_value_read_only_by_a_few_times_larger_broadcast_is_computed_there():
    """GQA (Qwen2: 2 key/value heads for 14 query heads): the rotary key's kernel and its
    repeat were two launches; now the repeat computes the key itself."""
    (kernel,) = _computing(fuse(repeated_heads(7)))
    assert kernel.inputs == ("k",) and kernel.outputs == ("identity_8",)


def test_few_times_broadcast_limits():
    plan = fuse(repeated_heads(9))  # more than 8 times: the chain's inputs would be read 9 times
    assert len(_computing(plan)) == 2
    [reason] = _rejected(plan, "exp_5", "identity_8")
    assert "aggressive" in reason
    assert len(_computing(fuse(repeated_heads(4, ops=60)))) == 2  # too much work per element
    assert len(_computing(fuse(repeated_heads(4, other_reader=True)))) == 2  # stored for its other reader


def _computing(plan):
    return [k for k in plan.kernels if k.kind != "view"]


def test_a_nearest_upsamples_source_index_is_recomputed_in_its_gather():
    """`interpolate(scale_factor=2, mode="nearest")`'s source index: iota, + a literal, x a
    literal, cast; three ops, read over a domain 2 x 320 x 64 x 64 times larger. Its literals and
    iota are not work, so the chain counts as cheap (it was a kernel of its own while they
    counted, SD 1.5's UNet had six), and a seventh real op still makes it not cheap."""
    from pipec_fusion import PRESETS

    group = _group
    index = group(("iota", "full", "add", "full", "mul", "cast"), (64,))
    gather = group(("iota", "take", "where", "lt", "add"), (2, 320, 64, 64))
    default = PRESETS["default"]()
    assert default.score(index, gather, "recompute") is not None
    longer = group(("iota", "full", "add", "full", "mul", "cast", "abs", "neg", "sub", "add", "mul"), (64,))
    assert default.score(longer, gather, "recompute") is None


def _group(ops, domain):
    """A pointwise group of `ops` over `domain`, as the engine describes one to the heuristics."""
    from pipec_fusion import GroupInfo

    numel = 1
    for d in domain:
        numel *= d
    return GroupInfo(kind="pointwise", nodes=tuple(f"n{i}" for i in range(len(ops))), ops=tuple(ops),
                     domain=domain, reduce_dims=(), numel=numel)


def test_a_batch_norms_per_channel_scale_is_recomputed_in_its_reader():
    """Inference batch norm's scale, weight / sqrt(running_var + eps) over the channels, read by
    the normalization over [N, C, H, W]: computed there, not as a kernel per norm (ResNet-50 had
    53 such launches a call). Transcendentals (exp) stay out, and a domain not 16x larger too."""
    from pipec_fusion import PRESETS

    default = PRESETS["default"]()
    scale = _group(("identity", "full", "add", "sqrt", "reciprocal", "mul"), (64,))
    normalize = _group(("sub", "mul", "mul", "add", "relu"), (32, 64, 56, 56))
    assert default.score(scale, normalize, "recompute") is not None
    assert default.score(_group(("add", "exp", "mul"), (64,)), normalize, "recompute") is None
    assert default.score(scale, _group(("mul",), (12, 64)), "recompute") is None  # 12x: neither rule

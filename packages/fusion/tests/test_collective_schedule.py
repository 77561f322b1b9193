"""Collectives in fusion: never fused with anything, starts as early as their inputs allow,
waits just before their first reader (docs/IR.md, "Collectives")."""

from fusion_graphs import GraphBuilder
from pipec_ir import CompileOptions

from pipec_fusion import preset


def fuse(graph, policy="default"):
    return preset(policy).fuse(graph, CompileOptions())


def comm_graph():
    """mm -> exp -> all_reduce -> wait -> relu, and independent work on y placed between the
    all_reduce and its reader in graph order; an all_gather of y that nothing needs until the end."""
    g = GraphBuilder()
    x, w, y = g.input("x", (8, 16)), g.input("w", (16, 8)), g.input("y", (8, 8))
    h = g.pw("exp", g.mm(x, w), name="h")
    start = g.node("all_reduce", (h,), (8, 8), name="start", reduce_op="sum", group="0")
    a = g.pw("sin", y, name="a")                       # independent of every collective
    b = g.reduce("sum", g.pw("mul", a, a, name="b"), (1,))
    wait = g.node("wait_tensor", (start,), (8, 8), name="wait")
    r = g.pw("add", g.pw("relu", wait, name="r0"), h, name="r")   # the first reader of the all_reduce
    gather = g.node("all_gather_into_tensor", (y,), (16, 8), name="gather", group_size=2, group="0")
    gw = g.node("wait_tensor", (gather,), (16, 8), name="gw")
    unread = g.node("all_reduce", (y,), (8, 8), name="unread", reduce_op="max", group="0")
    g.node("wait_tensor", (unread,), (8, 8), name="unread_wait")  # a wait nothing reads
    return g.build(r, b, gw)


def test_collectives_are_kernels_of_their_own_and_never_fused():
    plan = fuse(comm_graph(), "aggressive")
    coll = [k for k in plan.kernels if k.kind == "collective"]
    assert sorted(k.nodes[0] for k in coll) == ["gather", "gw", "start", "unread", "unread_wait", "wait"]
    assert all(len(k.nodes) == 1 for k in coll)
    reasons = {(r.first, r.second): r.reason for r in plan.rejected}
    assert reasons["h", "start"] == "collective all_reduce runs through torch.distributed"
    assert reasons["wait", "r0"] == "collective wait_tensor runs through torch.distributed"
    # the pointwise work on both sides of the all_reduce stays in separate kernels
    owner = {n: k.name for k in plan.kernels for n in k.nodes}
    assert owner["h"] != owner["r0"]


def test_starts_early_and_waits_just_before_their_first_reader():
    plan = fuse(comm_graph())
    order = [k.nodes for k in plan.kernels]
    at = {n: i for i, nodes in enumerate(order) for n in nodes}
    # starts with no pending inputs come first; the all_reduce right after its input's kernel
    assert {order[0][0], order[1][0]} == {"gather", "unread"}
    assert at["start"] == at["h"] + 1
    # each wait immediately before its first reader; the independent kernels run in between
    assert at["wait"] == at["r0"] - 1 and at["start"] < at["a"] < at["wait"]
    # waits nothing reads (graph outputs, or unread) go last
    assert order[-2:] == [("gw",), ("unread_wait",)]
    assert plan.kernels[at["start"]].name.startswith("pipec_all_reduce_")


def test_a_kernel_making_only_an_output_from_a_wait_goes_last_with_its_wait():
    """DDP's gradient copies under compiled autograd: `copy(wait(all_reduce(g)))` is a graph output
    nothing reads, so it and its wait move past the rest of the backward (which the all-reduce
    then overlaps); a reader that also holds another intermediate value keeps its place."""
    g = GraphBuilder()
    x, y = g.input("x", (8, 8)), g.input("y", (8, 8))
    start = g.node("all_reduce", (x,), (8, 8), name="start", reduce_op="sum", group="0")
    wait = g.node("wait_tensor", (start,), (8, 8), name="wait")
    copy = g.pw("identity", wait, name="copy")                     # only a graph output
    e = g.pw("exp", y, name="e")
    rest = g.reduce("sum", g.pw("mul", e, y, name="m"), (1,))    # the rest of the backward
    start2 = g.node("all_reduce", (y,), (8, 8), name="start2", reduce_op="sum", group="0")
    wait2 = g.node("wait_tensor", (start2,), (8, 8), name="wait2")
    mixed = g.pw("add", wait2, e, name="mixed")                    # reads e too: stays in place
    tail = g.pw("tanh", rest, name="tail")
    order = [k.nodes for k in fuse(g.build(copy, mixed, tail), "none").kernels]
    at = {n: i for i, nodes in enumerate(order) for n in nodes}
    assert order[-2:] == [("wait",), ("copy",)], order
    assert at["start"] < at["e"] and at["mixed"] < at["tail"] and at["wait2"] == at["mixed"] - 1

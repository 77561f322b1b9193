"""Lowerings of random ops to the `rand` op: counter-based Philox, reproducible (one row per ATen overload).

A graph that draws random numbers gets one seed: an `extern` node calling
`aten.randint.low(0, 2**31 - 1, [])` on the graph's device, so each call of the compiled
graph draws a fresh seed from torch's default generator and `torch.manual_seed` makes runs
reproducible (exported artifacts and CUDA Graph replays run externs through torch too).
Each `rand` node reads that seed and the row-major flat position of every element of its
own shape (int64 `iota` arithmetic), and gets its own `offset` (ordinal << 32) so that
two random nodes of one graph draw disjoint Philox streams. The value at a position does
not depend on how fusion blocks the kernel.
"""

from __future__ import annotations

import sympy

from pipec_ir import Device, Dtype, Node, Ref, TensorType, make_attrs
from pipec_ir.symbolic import contiguous_strides

from .dtypes import is_float
from .lower_indexing import I64, binop, iota
from .table import NoLowering, register

SEED_TARGET = "aten.randint.low"
# The extern reason of a random op left to torch by option `fallback_random` (`Lowerer`): the
# values are then eager's, draw for draw, for comparing a model with dropout or router noise
# against eager exactly (Inductor's `fallback_random`); not a missing lowering, so no warning.
FALLBACK_RANDOM = "fallback_random"
SEED_HIGH = 2**31 - 1
STREAM_SHIFT = 32  # offsets of successive rand nodes: 0, 2**32, 2*2**32, ... (disjoint counters)


def is_philox_seed(node: Node) -> bool:
    """Whether an IR node is the seed draw of a graph's random ops (an intended extern)."""
    return node.op == "extern" and node.attr("target") == SEED_TARGET and node.attr("reason") == "library"


def _seed(cx):
    """The graph's seed (one 0-d int64 extern, made on first use)."""
    seed = getattr(cx, "philox_seed", None)
    if seed is None:
        name = cx.fresh("philox_seed")
        t = TensorType((), I64)
        attrs = dict(target=SEED_TARGET, args=(0, SEED_HIGH, ()),
                     kwargs=(("dtype", Dtype(I64)), ("device", Device())), reason="library", seeded=True)
        cx.nodes.append(Node(name, "extern", (), t, make_attrs(**attrs)))
        cx.types[name] = t
        seed = cx.philox_seed = Ref(name)
        cx.philox_streams = 0
    return seed


def _flat_position(cx, shape):
    """The row-major flat position of every point of `shape` (int64)."""
    pos = None
    for d, stride in enumerate(contiguous_strides(shape)):
        if shape[d] == 1:
            continue
        c = iota(cx, shape, d)
        term = c if stride == 1 else binop(cx, "mul", c, stride, shape)
        pos = term if pos is None else binop(cx, "add", pos, term, shape)
    return pos if pos is not None else cx.full(0, shape, I64)


def rand(cx, shape, dtype: str, distribution: str):
    """U[0, 1) ("uniform") or N(0, 1) ("normal") values of (shape, dtype), drawn in fp32."""
    if not is_float(dtype):
        raise NoLowering(f"{dtype} random values")
    shape = tuple(sympy.sympify(s) for s in shape)
    seed = cx.broadcast(_seed(cx), shape)
    offset = cx.philox_streams << STREAM_SHIFT
    cx.philox_streams += 1
    r = cx.emit("rand", [seed, _flat_position(cx, shape)], shape, "float32",
                distribution=distribution, offset=offset)
    return cx.cast(r, dtype)


def _no_generator(kwargs):
    if kwargs.get("generator") is not None:
        raise NoLowering("an explicit generator")


def _creation(distribution: str):
    def lower(cx, node, *args, **kwargs):
        _no_generator(kwargs)
        t = cx.result(node)
        return rand(cx, t.shape, t.dtype, distribution)
    return lower


register("aten.rand.default", "aten.rand_like.default")(_creation("uniform"))
register("aten.randn.default", "aten.randn_like.default")(_creation("normal"))


@register("aten.bernoulli.p")
def lower_bernoulli_p(cx, node, x, p=0.5, generator=None):
    """1 with probability p, else 0, in x's shape and dtype."""
    _no_generator({"generator": generator})
    t = cx.result(node)
    u = rand(cx, t.shape, "float32", "uniform")
    return cx.cast(cx.pointwise("lt", [u, float(p)], t.shape, "bool", operand_dtype="float32"), t.dtype)


@register("aten.bernoulli.default")
def lower_bernoulli(cx, node, x, generator=None):
    """1 with probability x (elementwise), else 0."""
    _no_generator({"generator": generator})
    t = cx.result(node)
    u = rand(cx, t.shape, "float32", "uniform")
    return cx.cast(cx.pointwise("lt", [u, x], t.shape, "bool", operand_dtype="float32"), t.dtype)


@register("aten.native_dropout.default")
def lower_native_dropout(cx, node, x, p, train):
    """torch's decomposition: keep with probability 1 - p, scale kept values by 1 / (1 - p)."""
    t = cx.result(node, 0)
    if not train or p == 0:
        return cx.reshape(x, t.shape), cx.full(True, t.shape, "bool")
    if p >= 1:
        return cx.full(0, t.shape, t.dtype), cx.full(False, t.shape, "bool")
    keep = cx.pointwise("gt", [rand(cx, t.shape, "float32", "uniform"), float(p)], t.shape, "bool",
                        operand_dtype="float32")
    kept = cx.pointwise("mul", [x, keep], t.shape, t.dtype)
    return cx.pointwise("mul", [kept, 1.0 / (1.0 - p)], t.shape, t.dtype), keep


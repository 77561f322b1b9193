"""A tiny Graph builder for the fusion tests, plus the graphs they use."""

from __future__ import annotations

from pipec_ir import Graph, GraphInput, Node, SymbolRange, TensorType, make_attrs
from pipec_ir.symbolic import as_expr


def _shape(shape):
    return tuple(as_expr(s) for s in shape)


class GraphBuilder:
    def __init__(self, name: str = "g", symbols: dict[str, int] | None = None):
        self.name = name
        self.inputs: list[GraphInput] = []
        self.nodes: list[Node] = []
        self.symbols = tuple(SymbolRange(k, 2, None, v) for k, v in (symbols or {}).items())
        self._types: dict[str, TensorType] = {}
        self._count = 0

    def input(self, name, shape, dtype="float32", role="input") -> str:
        t = TensorType(_shape(shape), dtype)
        self.inputs.append(GraphInput(name, t, role))
        self._types[name] = t
        return name

    def shape(self, value):
        return self._types[value].shape

    def dtype(self, value) -> str:
        return self._types[value].dtype

    def node(self, op, inputs, shape, dtype="float32", name=None, **attrs) -> str:
        name = name or f"{op}_{self._count}"
        self._count += 1
        t = TensorType(_shape(shape), dtype)
        self.nodes.append(Node(name, op, tuple(inputs), t, make_attrs(**attrs)))
        self._types[name] = t
        return name

    # pointwise: shape of the first operand
    def pw(self, op, *xs, **attrs) -> str:
        return self.node(op, xs, self.shape(xs[0]), **attrs)

    def full(self, value, shape) -> str:
        return self.node("full", (), shape, value=value)

    def reduce(self, op, x, dims, keepdim=False) -> str:
        shape = self.shape(x)
        out = [1 if d in dims else s for d, s in enumerate(shape)] if keepdim else \
              [s for d, s in enumerate(shape) if d not in dims]
        return self.node(op, (x,), out, dims=tuple(dims), keepdim=keepdim)

    # views: the dtype of their input
    def expand(self, x, shape) -> str:
        return self.node("expand", (x,), shape, self.dtype(x))

    def reshape(self, x, shape) -> str:
        return self.node("reshape", (x,), shape, self.dtype(x))

    def permute(self, x, dims) -> str:
        shape = self.shape(x)
        return self.node("permute", (x,), [shape[d] for d in dims], self.dtype(x), dims=tuple(dims))

    def mm(self, a, b) -> str:
        return self.node("mm", (a, b), [self.shape(a)[0], self.shape(b)[1]])

    def build(self, *outputs) -> Graph:
        return Graph(self.name, tuple(self.inputs), tuple(self.nodes), tuple(outputs), self.symbols)


# ---------------------------------------------------------------- graphs


def pointwise_chain(n=8, m=16):
    g = GraphBuilder("chain")
    x = g.input("x", [n, m])
    a = g.pw("exp", x)
    two = g.full(2.0, [n, m])
    b = g.pw("mul", a, two)
    c = g.pw("relu", b)
    return g.build(c)


def softmax(g=None, n="s0", m=32, x=None, out=True):
    g = g or GraphBuilder("softmax", {"s0": 8})
    x = x or g.input("x", [n, m])
    mx = g.reduce("max", x, (1,), keepdim=True)
    sub = g.pw("sub", x, g.expand(mx, g.shape(x)))
    e = g.pw("exp", sub)
    s = g.reduce("sum", e, (1,), keepdim=True)
    y = g.pw("div", e, g.expand(s, g.shape(x)))
    return g.build(y) if out else (g, y)


def layer_norm(n=8, m=32):
    g = GraphBuilder("layer_norm")
    x = g.input("x", [n, m])
    w = g.input("weight", [m], role="parameter")
    b = g.input("bias", [m], role="parameter")
    s1 = g.reduce("sum", x, (1,), keepdim=True)
    mean = g.pw("mul", s1, g.full(1.0 / m, [n, 1]))
    d = g.pw("sub", x, g.expand(mean, [n, m]))
    sq = g.pw("mul", d, d)
    s2 = g.reduce("sum", sq, (1,), keepdim=True)
    var = g.pw("mul", s2, g.full(1.0 / m, [n, 1]))
    rstd = g.pw("rsqrt", g.pw("add", var, g.full(1e-5, [n, 1])))
    y = g.pw("mul", d, g.expand(rstd, [n, m]))
    y = g.pw("mul", y, g.expand(g.reshape(w, [1, m]), [n, m]))
    y = g.pw("add", y, g.expand(g.reshape(b, [1, m]), [n, m]))
    return g.build(y)


def linear_gelu(n=8, k=16, o=32):
    g = GraphBuilder("linear_gelu")
    x = g.input("x", [n, k])
    w = g.input("weight", [o, k], role="parameter")
    b = g.input("bias", [o], role="parameter")
    mm = g.mm(x, g.permute(w, (1, 0)))
    y = g.pw("add", mm, g.expand(g.reshape(b, [1, o]), [n, o]))
    y = g.pw("gelu", y, approximate="none")
    return g.build(y)


def diamond_through_mm(n=8, k=16):
    g = GraphBuilder("diamond")
    x = g.input("x", [n, k])
    w = g.input("w", [k, k], role="parameter")
    a = g.pw("relu", x)
    m = g.mm(a, w)
    c = g.pw("add", a, m)
    return g.build(c)


def reductions_over_different_dims(n=8, m=16):
    g = GraphBuilder("two_dims")
    x = g.input("x", [n, m])
    r1 = g.reduce("sum", x, (1,), keepdim=True)
    d = g.pw("sub", x, g.expand(r1, [n, m]))
    r2 = g.reduce("sum", d, (0,))
    return g.build(r2)


def two_independent(n=8, m=16):
    g = GraphBuilder("independent")
    x = g.input("x", [n, m])
    y = g.input("y", [n, m])
    a = g.pw("exp", x)
    b = g.pw("sin", y)
    return g.build(a, b)


def broadcast_producer(n=8, m=16):
    """A [n, 1] pointwise producer read through expand by an [n, m] consumer."""
    g = GraphBuilder("broadcast")
    x = g.input("x", [n, m])
    c = g.input("c", [n, 1])
    e = g.pw("exp", c)
    y = g.pw("add", x, g.expand(e, [n, m]))
    return g.build(y)

"""Which size symbols a program may be run *padded* along (Program.pad_symbols).

Running padded along a symbol `s` means: every input is allocated at a larger value
B of `s` (a size bucket), each input dim holds its real data in the prefix
[0, size(s)) — a dim of size `4*s` holds `4*s` real elements first — and every
output is sliced back to its real prefix. That is correct when no element of the
real region of any output reads a padded element. The CUDA Graph runtime uses it to
replay one graph for every size of a bucket.

The check walks the graph once per symbol and gives every value a *layout* per dim:

* `None` ("wild"): the value is constant along the dim (a broadcast or a `full`), so
  any arrangement is fine;
* a tuple of factors (outer to inner) whose product is the dim's size: how the real
  elements sit in the padded dim. A layout whose only padded factor (one mentioning
  `s`) is the first is a prefix, normalized to `(size,)`; a dim made by merging
  `[s0, s1]` with s1 padded is `(s0, s1)`: its real elements are not a prefix, so
  it must be split back before it is sliced, reduced over or returned.

Pointwise ops need equal layouts; a reduction, a matmul contraction or an extern
touching a padded dim, a padded count (`full` of a Size mentioning `s`) or a slice
or select whose start depends on `s` makes the symbol unpaddable.
"""

from __future__ import annotations

import sympy
from pipec_ir import Graph, Size, attr_expr, kind_of
from pipec_ir.symbolic import size_symbol


class _Unsafe(Exception):
    pass


def pad_symbols(graph: Graph) -> tuple[str, ...]:
    """The graph's size symbols along which inputs may be padded (see the module docstring)."""
    out = []
    for rng in graph.symbols:
        try:
            _Walk(graph, size_symbol(rng.name)).run()
        except _Unsafe:
            continue
        except Exception:  # noqa: BLE001 - anything unexpected: do not claim the symbol is safe
            continue
        out.append(rng.name)
    return tuple(out)


def _same(a, b) -> bool:
    return sympy.expand(sympy.sympify(a) - sympy.sympify(b)) == 0


class _Walk:
    def __init__(self, graph: Graph, sym: sympy.Symbol):
        self.graph = graph
        self.sym = sym
        self.types = graph.types()
        self.layout: dict[str, tuple] = {}

    # ------------------------------------------------------------ layouts

    def padded(self, expr) -> bool:
        return self.sym in sympy.sympify(expr).free_symbols

    def norm(self, factors: tuple, size) -> tuple:
        """Merge runs of unpadded factors; a prefix layout becomes (size,)."""
        merged: list = []
        for f in factors:
            f = sympy.sympify(f)
            if f == 1:
                continue
            if merged and not self.padded(f) and not self.padded(merged[-1]):
                merged[-1] = merged[-1] * f
            else:
                merged.append(f)
        if not any(self.padded(f) for f in merged[1:]):
            return (sympy.sympify(size),)
        return tuple(merged)

    @staticmethod
    def is_prefix(layout, size=None) -> bool:
        return layout is None or len(layout) == 1

    def of(self, name: str) -> tuple:
        return self.layout[name]

    def shape(self, name: str) -> tuple:
        return tuple(sympy.sympify(s) for s in self.types[name].shape)

    def check_attr(self, value) -> None:
        if isinstance(value, Size) and self.padded(value.value):
            raise _Unsafe
        if isinstance(value, tuple):
            for v in value:
                self.check_attr(v)

    # ------------------------------------------------------------ the walk

    def run(self) -> None:
        for i in self.graph.inputs:
            self.layout[i.name] = tuple((sympy.sympify(s),) for s in i.type.shape)
        for node in self.graph.nodes:
            for _, v in node.attrs:
                self.check_attr(v)
            self.layout[node.name] = self.visit(node)
        for o in self.graph.outputs:
            if o is None:
                continue
            for lay, size in zip(self.of(o), self.shape(o)):
                if not self.is_prefix(lay, size):
                    raise _Unsafe

    def visit(self, node) -> tuple:
        op = node.op
        shape = tuple(sympy.sympify(s) for s in node.type.shape)
        kind = kind_of(op)
        if op in ("extern", "getitem"):
            touched = [self.shape(i) for i in node.inputs if i in self.types] + [shape]
            if any(self.padded(s) for sh in touched for s in sh):
                raise _Unsafe
            return tuple((s,) for s in shape)
        if kind == "creation":
            if op == "iota":
                d = node.attr("dim")
                return tuple((s,) if k == d else None for k, s in enumerate(shape))
            return tuple(None for _ in shape)
        if kind == "pointwise":
            result = []
            for d in range(len(shape)):
                lays = [self.of(i)[d] for i in node.inputs]
                known = [lay for lay in lays if lay is not None]
                if any(lay != known[0] for lay in known[1:]):
                    raise _Unsafe
                result.append(known[0] if known else None)
            return tuple(result)
        if kind == "reduction":
            src = node.inputs[0]
            dims = set(node.attr("dims"))
            if any(self.padded(s) for d, s in enumerate(self.shape(src)) if d in dims):
                raise _Unsafe
            lay = self.of(src)
            if node.attr("keepdim"):
                return tuple((sympy.Integer(1),) if d in dims else lay[d] for d in range(len(lay)))
            return tuple(lay[d] for d in range(len(lay)) if d not in dims)
        if kind == "scan":  # out[i] reads x[0..i] along the dim: a real prefix gives a real prefix
            d, lay = node.attr("dim"), self.of(node.inputs[0])
            if not self.is_prefix(lay[d]):
                raise _Unsafe
            return lay[:d] + ((shape[d],),) + lay[d + 1:]
        if kind == "matmul":
            a, b = node.inputs
            if self.padded(self.shape(a)[-1]):
                raise _Unsafe
            la, lb = self.of(a), self.of(b)
            if op == "bmm":
                if la[0] is not None and lb[0] is not None and la[0] != lb[0]:
                    raise _Unsafe
                return (la[0] if la[0] is not None else lb[0], la[1], lb[2])
            return (la[0], lb[1])
        if kind == "view":
            return self.view(node, shape)
        raise _Unsafe

    def view(self, node, shape) -> tuple:
        src = node.inputs[0]
        lay, src_shape = self.of(src), self.shape(src)
        op = node.op
        if op == "permute":
            return tuple(lay[d] for d in node.attr("dims"))
        if op == "expand":
            offset = len(shape) - len(src_shape)
            return tuple(None if d < offset or (src_shape[d - offset] == 1 and shape[d] != 1) else lay[d - offset]
                         for d in range(len(shape)))
        if op in ("slice", "select"):
            d = node.attr("dim")
            if self.padded(attr_expr(node.attr("start" if op == "slice" else "index"))):
                raise _Unsafe
            if not self.is_prefix(lay[d], src_shape[d]):
                raise _Unsafe
            if op == "select":
                return lay[:d] + lay[d + 1:]
            return lay[:d] + ((shape[d],) if lay[d] is not None else None,) + lay[d + 1:]
        if op == "reshape":
            return self.reshape(lay, src_shape, shape)
        raise _Unsafe

    def reshape(self, lay, src_shape, shape) -> tuple:
        factors: list = []
        for layout, size in zip(lay, src_shape):
            factors.extend(layout if layout is not None else (size,))
        factors = [sympy.sympify(f) for f in factors if sympy.sympify(f) != 1]
        out, k = [], 0
        for size in shape:
            if size == 1:
                out.append((sympy.Integer(1),))
                continue
            taken, prod = [], sympy.Integer(1)
            while not _same(prod, size):
                if k >= len(factors):
                    raise _Unsafe
                f = factors[k]
                need = sympy.simplify(size / prod)
                ratio = sympy.simplify(need / f)
                if _is_whole(ratio):  # the whole factor fits (exactly, or more are needed)
                    taken.append(f)
                    prod = prod * f
                    k += 1
                    continue
                split = sympy.simplify(f / need)
                if self.padded(split) or not _is_whole(split) or not _is_whole(need):
                    raise _Unsafe  # the padded symbol would land in an inner part: not a prefix
                taken.append(need)  # the outer part of f; its inner part is the next factor
                prod = prod * need
                factors[k] = split
            out.append(self.norm(tuple(taken), size))
        if any(f != 1 for f in factors[k:]):
            raise _Unsafe
        return tuple(out)


def _is_whole(expr) -> bool:
    """A positive integer, or a product of size symbols with a positive integer coefficient."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr) >= 1
    if expr.is_Symbol:
        return True
    if expr.is_Mul:
        return all(_is_whole(a) for a in expr.args)
    if expr.is_Pow:
        return expr.args[0].is_Symbol and expr.args[1].is_Integer and int(expr.args[1]) > 0
    return False

"""Type rules: what type each op gives, from its inputs' types and its attributes.

Each row of `pipec_ir.ops.OPS` names one of these rules. A rule reads the node's
attributes (checking their types: `AttributeTypeError`), checks its operands'
types against the op's contract (docs/IR.md) and returns the type the op gives:
an `Inferred` whose shape entries and dtype may be None where the op leaves
them to the node (a `reshape` picks its own shape, a `cast` its own dtype).
`verify` compares the node's declared type with it.

Sizes are sympy expressions of the graph's symbols. Two sizes differ only when
that is certain: their difference simplifies to a nonzero number, or is nonzero
at the symbols' example values (`SymbolRange.hint`, sizes the trace really had,
so every relation the trace relied on holds there). Anything else is accepted:
a rule never raises a false alarm on a symbolic size it cannot decide.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import sympy

from . import types as ir
from .errors import AttributeTypeError, TypeMismatchError
from .symbolic import numel


class Inferred(NamedTuple):
    shape: tuple | None  # None: any shape; else one entry per dim, None = any size
    dtype: str | None  # None: any dtype


class Context:
    """What a rule may look at besides the node and its inputs' types: the nodes defined so
    far by name (`getitem` reads its extern's `results`) and the symbols' example values."""

    def __init__(self, hints: dict, nodes: dict[str, ir.Node]) -> None:
        self.hints = hints
        self.nodes = nodes
        self._same: dict = {}

    def same(self, a, b) -> bool:
        """False only when sizes a and b certainly differ (see the module docstring)."""
        if a is b or a == b:
            return True
        key = (a, b)
        found = self._same.get(key)
        if found is None:
            found = self._same[key] = _same_size(a, b, self.hints)
        return found

    def same_shape(self, a: tuple, b: tuple) -> bool:
        """Shapes a and b are not certainly different (an entry None in a: any size)."""
        if a == b:  # parsed sizes are shared objects: usually settled here, by identity
            return True
        return len(a) == len(b) and all(x is None or self.same(x, y) for x, y in zip(a, b))


def _same_size(a, b, hints) -> bool:
    try:
        diff = sympy.expand(sympy.sympify(a) - sympy.sympify(b))
    except Exception:  # noqa: BLE001 - sympy raises many types; undecidable means accept
        return True
    if diff == 0:
        return True
    if diff.is_Number:
        return False
    free = diff.free_symbols
    if not free or not all(s in hints for s in free):
        return True
    try:
        value = diff.xreplace({s: hints[s] for s in free})
    except Exception:  # noqa: BLE001
        return True
    return not (value.is_Number and value != 0)


def fmt_shape(shape) -> str:
    return "[" + ", ".join("?" if s is None else str(s) for s in shape) + "]"


def fmt_type(t: ir.TensorType) -> str:
    return f"{t.dtype}{fmt_shape(t.shape)}"


# ---------------------------------------------------------------- attributes


def _attr(node: ir.Node, key: str):
    return node.attr(key)


def attr_int(node: ir.Node, key: str, *, lo: int | None = None, hi: int | None = None) -> int:
    """An integer attribute (not a bool), optionally in [lo, hi)."""
    v = _attr(node, key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise AttributeTypeError(f"attribute {key}={v!r} must be an integer")
    if (lo is not None and v < lo) or (hi is not None and v >= hi):
        bounds = f"[{'' if lo is None else lo}, {'' if hi is None else hi})"
        raise AttributeTypeError(f"attribute {key}={v} is outside {bounds}")
    return v


def attr_size(node: ir.Node, key: str):
    """An integer attribute that may be symbolic (an int or a `Size`) as a sympy expression."""
    v = _attr(node, key)
    if isinstance(v, ir.Size):
        return v.value
    if not isinstance(v, int) or isinstance(v, bool):
        raise AttributeTypeError(f"attribute {key}={v!r} must be an integer or a size expression")
    return sympy.Integer(v)


def attr_bool(node: ir.Node, key: str) -> bool:
    v = _attr(node, key)
    if not isinstance(v, bool):
        raise AttributeTypeError(f"attribute {key}={v!r} must be true or false")
    return v


def attr_choice(node: ir.Node, key: str, choices: tuple[str, ...]) -> str:
    v = _attr(node, key)
    if v not in choices or not isinstance(v, str):
        raise AttributeTypeError(f"attribute {key}={v!r} must be one of {', '.join(choices)}")
    return v


def attr_number(node: ir.Node, key: str, *, size_ok: bool = False):
    v = _attr(node, key)
    if isinstance(v, bool | int | float) or (size_ok and isinstance(v, ir.Size)):
        return v
    raise AttributeTypeError(f"attribute {key}={v!r} must be a number{' or a size expression' if size_ok else ''}")


def attr_dims(node: ir.Node, key: str, rank: int) -> tuple[int, ...]:
    v = _attr(node, key)
    if not isinstance(v, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) for d in v):
        raise AttributeTypeError(f"attribute {key}={v!r} must be a list of integers")
    if any(d < 0 or d >= rank for d in v):
        raise AttributeTypeError(f"attribute {key}={list(v)} is outside [0, {rank}) for an input of rank {rank}")
    return v


# ---------------------------------------------------------------- operand checks


def _mismatch(msg: str):
    return TypeMismatchError(msg)


def _operand_shapes_equal(node: ir.Node, ins, ctx: Context) -> None:
    """Pointwise operands have one shape: the IR has no implicit broadcasting."""
    first = ins[0]
    for name, t in zip(node.inputs[1:], ins[1:]):
        if not ctx.same_shape(t.shape, first.shape):
            raise _mismatch(f"operand {name} is {fmt_type(t)} but operand {node.inputs[0]} is {fmt_type(first)} "
                            "(no implicit broadcasting: capture inserts expand)")


def _operand_dtype(node: ir.Node, ins, want: str, what: str = "operand") -> None:
    for name, t in zip(node.inputs, ins):
        if t.dtype != want:
            raise _mismatch(f"{what} {name} is {t.dtype}, expected {want}")


def _one_dtype(names, ins) -> str:
    dtypes = {t.dtype for t in ins}
    if len(dtypes) > 1:
        listed = ", ".join(f"{n}: {t.dtype}" for n, t in zip(names, ins))
        raise _mismatch(f"operands have different dtypes ({listed}; dtypes are pre-promoted: capture casts)")
    return ins[0].dtype


# ---------------------------------------------------------------- rules
# rule(node, ins: list[TensorType], ctx) -> Inferred


def pointwise(node, ins, ctx) -> Inferred:
    """Arithmetic: operands of one shape and of the node's dtype; the result is that type."""
    _operand_shapes_equal(node, ins, ctx)
    return Inferred(ins[0].shape, _one_dtype(node.inputs, ins))


def gelu(node, ins, ctx) -> Inferred:
    attr_choice(node, "approximate", ("none", "tanh"))
    return pointwise(node, ins, ctx)


def compare(node, ins, ctx) -> Inferred:
    """eq/ne/lt/...: operands of one shape and one dtype; the result is bool."""
    _operand_shapes_equal(node, ins, ctx)
    _one_dtype(node.inputs, ins)
    return Inferred(ins[0].shape, "bool")


def logical(node, ins, ctx) -> Inferred:
    _operand_shapes_equal(node, ins, ctx)
    _operand_dtype(node, ins, "bool")
    return Inferred(ins[0].shape, "bool")


def cast(node, ins, ctx) -> Inferred:
    return Inferred(ins[0].shape, None)


def where(node, ins, ctx) -> Inferred:
    _operand_shapes_equal(node, ins, ctx)
    _operand_dtype(node, ins[:1], "bool", "condition")
    return Inferred(ins[0].shape, _one_dtype(node.inputs[1:], ins[1:]))


def rand(node, ins, ctx) -> Inferred:
    attr_choice(node, "distribution", ("uniform", "normal"))
    attr_int(node, "offset", lo=0)
    _operand_shapes_equal(node, ins, ctx)
    _operand_dtype(node, ins, "int64")
    return Inferred(ins[0].shape, "float32")


def reduction_to(result_dtype: str | None) -> Rule:
    """The rule of a reduction whose result has `result_dtype` (None: the input's dtype)."""
    def rule(node, ins, ctx) -> Inferred:
        return Inferred(reduction(node, ins, ctx).shape, result_dtype or ins[0].dtype)
    return rule


def reduction(node, ins, ctx) -> Inferred:
    """The shape of a reduction's result (and its input's dtype)."""
    x = ins[0]
    dims = attr_dims(node, "dims", x.rank)
    if list(dims) != sorted(set(dims)):
        raise AttributeTypeError(f"attribute dims={list(dims)} must be sorted and without repeats")
    keepdim = attr_bool(node, "keepdim")
    if keepdim:
        shape = tuple(_ONE if d in dims else s for d, s in enumerate(x.shape))
    else:
        shape = tuple(s for d, s in enumerate(x.shape) if d not in dims)
    return Inferred(shape, x.dtype)


_ONE = sympy.Integer(1)


def scan_over(combines: dict) -> Rule:
    """The rule of `scan` whose `combine` is a key of `combines` (pipec_ir.ops.SCAN_COMBINES)."""
    def scan(node, ins, ctx) -> Inferred:
        x = ins[0]
        attr_int(node, "dim", lo=0, hi=x.rank)
        combine = attr_choice(node, "combine", tuple(combines))
        if combines[combine].floats_only and x.dtype not in ir.FLOAT_DTYPES:
            raise _mismatch(f"combine {combine} needs a floating-point input, got {x.dtype}")
        return Inferred(x.shape, x.dtype)
    return scan


def reshape(node, ins, ctx) -> Inferred:
    x = ins[0]
    if not _same_numel(x.shape, node.type.shape, ctx):
        raise _mismatch(f"reshape of {fmt_type(x)} ({x.numel} elements) to {fmt_shape(node.type.shape)} "
                        f"({node.type.numel} elements)")
    return Inferred(None, x.dtype)


def _same_numel(a: tuple, b: tuple, ctx: Context) -> bool:
    if a == b:
        return True
    if all(s.is_Integer for s in a) and all(s.is_Integer for s in b):
        return math.prod(map(int, a)) == math.prod(map(int, b))
    return ctx.same(numel(a), numel(b))


def permute(node, ins, ctx) -> Inferred:
    x = ins[0]
    dims = attr_dims(node, "dims", x.rank)
    if sorted(dims) != list(range(x.rank)):
        raise AttributeTypeError(f"attribute dims={list(dims)} is not a permutation of the {x.rank} dims")
    return Inferred(tuple(x.shape[d] for d in dims), x.dtype)


def expand(node, ins, ctx) -> Inferred:
    x = ins[0]
    out = node.type.shape
    if len(out) != x.rank:
        raise _mismatch(f"expand from rank {x.rank} to rank {len(out)} (reshape first): {fmt_type(x)} to "
                        f"{fmt_shape(out)}")
    shape = []
    for d, (a, b) in enumerate(zip(x.shape, out)):
        if a is b:
            shape.append(a)
        elif a == 1:
            shape.append(b)  # a broadcast dim: any size
        elif not ctx.same(a, b):
            raise _mismatch(f"expand of {fmt_type(x)} to {fmt_shape(out)}: dim {d} of size {a} is not 1")
        else:
            shape.append(a)
    return Inferred(tuple(shape), x.dtype)


def slice_(node, ins, ctx) -> Inferred:
    x = ins[0]
    dim = attr_int(node, "dim", lo=0, hi=x.rank)
    start = attr_size(node, "start")
    step = attr_int(node, "step", lo=1)
    if node.type.rank != x.rank:
        return Inferred(x.shape, x.dtype)  # a rank mismatch: reported as such
    length = node.type.shape[dim]
    n, first, size = _at_hints(length, ctx), _at_hints(start, ctx), _at_hints(x.shape[dim], ctx)
    if n is not None and n > 0 and first is not None and size is not None and (
            first < 0 or first + step * (n - 1) >= size):
        raise _mismatch(f"slice [{start}:{start + step * length}:{step}] of dim {dim} of {fmt_type(x)} "
                        "reads outside it")
    # the length along `dim` is the node's own (checked against the input's size above)
    return Inferred(tuple(node.type.shape[d] if d == dim else s for d, s in enumerate(x.shape)), x.dtype)


def select(node, ins, ctx) -> Inferred:
    x = ins[0]
    dim = attr_int(node, "dim", lo=0, hi=x.rank)
    index = _at_hints(attr_size(node, "index"), ctx)
    size = _at_hints(x.shape[dim], ctx)
    if index is not None and size is not None and not 0 <= index < size:
        raise _mismatch(f"select index {index} of dim {dim} of {fmt_type(x)} is out of range")
    return Inferred(tuple(s for d, s in enumerate(x.shape) if d != dim), x.dtype)


def _at_hints(expr, ctx: Context) -> int | None:
    """An integer expression's value at the symbols' example values, if it has one."""
    if expr.is_Integer:
        return int(expr)
    free = expr.free_symbols
    if not all(s in ctx.hints for s in free):
        return None
    try:
        value = expr.xreplace({s: ctx.hints[s] for s in free})
    except Exception:  # noqa: BLE001
        return None
    return int(value) if value.is_Integer else None


def take(node, ins, ctx) -> Inferred:
    src, index = ins
    if index.dtype not in ("int64", "int32"):
        raise _mismatch(f"take index {node.inputs[1]} is {index.dtype}, expected int64 or int32")
    return Inferred(index.shape, src.dtype)


def scatter_over(reduces) -> Rule:
    """The rule of `scatter` whose `reduce` is one of `reduces` (pipec_ir.ops.SCATTER_REDUCES)."""
    def scatter(node, ins, ctx) -> Inferred:
        base, index, src = ins
        attr_choice(node, "reduce", tuple(reduces))
        if index.dtype != "int64":
            raise _mismatch(f"scatter index {node.inputs[1]} is {index.dtype}, expected int64")
        if index.rank != src.rank or not all(ctx.same(a, b) for a, b in zip(index.shape, src.shape)):
            raise _mismatch(f"scatter index {node.inputs[1]} is {fmt_type(index)} but src {node.inputs[2]} is "
                            f"{fmt_type(src)}: they must have one shape")
        if src.dtype != base.dtype:
            raise _mismatch(f"scatter src {node.inputs[2]} is {src.dtype} but self {node.inputs[0]} is {base.dtype}")
        return Inferred(base.shape, base.dtype)
    return scatter


def full(node, ins, ctx) -> Inferred:
    attr_number(node, "value", size_ok=True)
    return Inferred(None, None)


def iota(node, ins, ctx) -> Inferred:
    attr_int(node, "dim", lo=0, hi=node.type.rank)
    attr_number(node, "start")
    attr_number(node, "step")
    return Inferred(None, None)


def mm(node, ins, ctx) -> Inferred:
    a, b = ins
    batch = 1 if node.op == "bmm" else 0
    rank = 2 + batch
    if a.rank != rank or b.rank != rank:
        raise _mismatch(f"{node.op} needs two rank-{rank} operands, got {fmt_type(a)} and {fmt_type(b)}")
    if not ctx.same(a.shape[-1], b.shape[-2]) or (batch and not ctx.same(a.shape[0], b.shape[0])):
        raise _mismatch(f"{node.op} of {fmt_type(a)} and {fmt_type(b)}: sizes do not match")
    if a.dtype != b.dtype:
        raise _mismatch(f"{node.op} operands have different dtypes {a.dtype}, {b.dtype}")
    return Inferred(a.shape[:-1] + b.shape[-1:], a.dtype)


# ---------------------------------------------------------------- collectives (docs/IR.md, "Collectives")


def _group(node) -> str:
    group = _attr(node, "group")
    if not isinstance(group, str) or not group:
        raise AttributeTypeError(f"attribute group={group!r} must be a process group's name")
    return group




def _split_sizes(node, key: str):
    """None, or the split sizes along dim 0 as sympy expressions."""
    v = _attr(node, key)
    if v is None:
        return None
    if not isinstance(v, tuple) or not all(isinstance(s, ir.Size) or (isinstance(s, int) and not isinstance(s, bool))
                                           for s in v):
        raise AttributeTypeError(f"attribute {key}={v!r} must be null or a list of sizes")
    return [s.value if isinstance(s, ir.Size) else sympy.Integer(s) for s in v]


def _rows(node, x: ir.TensorType) -> None:
    if x.rank == 0:
        raise _mismatch(f"{node.op} needs an operand of rank >= 1 (it splits or gathers along dim 0)")


def all_reduce_over(reduce_ops: tuple[str, ...]) -> Rule:
    def all_reduce(node, ins, ctx) -> Inferred:
        attr_choice(node, "reduce_op", reduce_ops), _group(node)
        return Inferred(ins[0].shape, ins[0].dtype)
    return all_reduce


def all_gather(node, ins, ctx) -> Inferred:
    _group(node)
    (x,) = ins
    _rows(node, x)
    size = attr_int(node, "group_size", lo=1)
    return Inferred((x.shape[0] * size,) + x.shape[1:], x.dtype)


def reduce_scatter_over(reduce_ops: tuple[str, ...]) -> Rule:
    def reduce_scatter(node, ins, ctx) -> Inferred:
        attr_choice(node, "reduce_op", reduce_ops), _group(node)
        (x,) = ins
        _rows(node, x)
        size = attr_int(node, "group_size", lo=1)
        if node.type.rank == x.rank and not ctx.same(node.type.shape[0] * size, x.shape[0]):
            raise _mismatch(f"{node.op} over {size} ranks of {fmt_type(x)} cannot give {fmt_type(node.type)}")
        return Inferred((None,) + x.shape[1:], x.dtype)
    return reduce_scatter


def all_to_all(node, ins, ctx) -> Inferred:
    _group(node)
    (x,) = ins
    _rows(node, x)
    out, inp = _split_sizes(node, "output_split_sizes"), _split_sizes(node, "input_split_sizes")
    if inp is not None and not ctx.same(sum(inp, sympy.Integer(0)), x.shape[0]):
        raise _mismatch(f"{node.op}: input_split_sizes do not add up to dim 0 of {fmt_type(x)}")
    rows = x.shape[0] if out is None else sum(out, sympy.Integer(0))
    return Inferred((rows,) + x.shape[1:], x.dtype)


def wait_for(starts: tuple[str, ...]) -> Rule:
    """The rule of `wait_tensor`: it reads the pending result of one of the ops `starts`."""
    def wait_tensor(node, ins, ctx) -> Inferred:
        src = ctx.nodes.get(node.inputs[0])
        if src is None or src.op not in starts:
            raise _mismatch(f"wait_tensor reads {node.inputs[0]!r}, which is not a collective")
        return Inferred(ins[0].shape, ins[0].dtype)
    return wait_tensor


def extern(node, ins, ctx) -> Inferred:
    """An ATen call: its declared type is trusted; its tensor arguments must be its inputs."""
    target = _attr(node, "target")
    if not isinstance(target, str):
        raise AttributeTypeError(f"attribute target={target!r} must be an ATen overload name")
    reason = _attr(node, "reason")
    if not isinstance(reason, str):
        raise AttributeTypeError(f"attribute reason={reason!r} must be a string")
    args, kwargs = _attr(node, "args"), _attr(node, "kwargs")
    if not isinstance(args, tuple):
        raise AttributeTypeError(f"attribute args={args!r} must be a list")
    if not isinstance(kwargs, tuple) or not all(
            isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) for p in kwargs):
        raise AttributeTypeError(f"attribute kwargs={kwargs!r} must be a list of [name, value] pairs")
    inputs = set(node.inputs)
    for name in ir.ref_names((args, kwargs)):
        if name not in inputs:
            raise AttributeTypeError(f"argument {name!r} of {target} is not one of the node's inputs")
    if node.type.dtype == "tuple":
        results = _attr(node, "results")
        if not isinstance(results, tuple) or not all(r is None or _is_result(r) for r in results):
            raise AttributeTypeError(f"attribute results={results!r} must list [shape, dtype] (or null) per result")
    return Inferred(None, None)


def _is_result(r) -> bool:
    if not (isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], tuple) and r[1] in ir.DTYPES):
        return False
    return all(isinstance(s, str | int) and not isinstance(s, bool) for s in r[0])


def result_type(r) -> ir.TensorType:
    """A multi-result extern's `results` entry as a TensorType."""
    from .symbolic import as_expr

    return ir.TensorType(tuple(as_expr(s) for s in r[0]), r[1])



def getitem(node, ins, ctx) -> Inferred:
    src = ctx.nodes.get(node.inputs[0])
    if src is None or src.op != "extern" or src.type.dtype != "tuple":
        raise _mismatch(f"getitem reads {node.inputs[0]!r}, which is not a multi-result extern")
    results = src.attr("results")
    index = attr_int(node, "index", lo=0, hi=len(results))
    if results[index] is None:
        raise _mismatch(f"result {index} of {src.name} is not a tensor")
    try:
        t = result_type(results[index])
    except Exception:  # noqa: BLE001 - sympy raises many types
        raise AttributeTypeError(f"result {index} of {src.name} has an unreadable shape {results[index][0]!r}") \
            from None
    return Inferred(t.shape, t.dtype)


Rule = Callable[[ir.Node, list, Context], Inferred]

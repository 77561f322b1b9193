"""The IR a lowering emits into: `GraphBuilder` names values, records their types, and
makes explicit everything the IR forbids (docs/IR.md): broadcasts become `reshape` +
`expand`, Python scalars become `full` nodes, dtype promotion becomes `cast` nodes.

`lowerer.Lowerer` is a `GraphBuilder` that walks an fx graph; a lowering (table.py) sees
only the builder's methods.
"""

from __future__ import annotations

import math

import sympy
import torch
import torch.fx

from pipec_ir import Node, Ref, Size, TensorType, make_attrs
from pipec_ir.symbolic import expr_str

from .dtypes import ir_dtype, is_float, torch_dtype
from .errors import CaptureError
from .symbols import SymbolTable
from .table import NoLowering, op_name


def source_line(node: torch.fx.Node) -> str:
    """' at FILE:LINE' of the user code that made `node` (torch records its stack), or ''."""
    import os
    import re

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    frames = re.findall(r'File "([^"]+)", line (\d+)', str(node.meta.get("stack_trace") or ""))
    user = [(f, line) for f, line in frames if not os.path.abspath(f).startswith(torch_dir)]
    return f" at {user[-1][0]}:{user[-1][1]}" if user else ""


class GraphBuilder:
    """The IR nodes emitted so far, their types, and the names in use."""

    def __init__(self, *, model_name: str, reserved=()) -> None:
        self.model_name = model_name
        self.symbols = SymbolTable()
        self.nodes: list[Node] = []
        self.types: dict[str, TensorType] = {}
        self.used: set[str] = set()
        self.reserved = set(reserved)  # names the fx graph's nodes keep for their own results
        self.current: torch.fx.Node | None = None

    # ------------------------------------------------------------ names and types

    def fresh(self, hint: str) -> str:
        hint = "".join(c if (c.isalnum() or c == "_") else "_" for c in hint) or "v"
        if hint not in self.used and hint not in self.reserved:
            self.used.add(hint)
            return hint
        k = 1
        while f"{hint}_{k}" in self.used or f"{hint}_{k}" in self.reserved:
            k += 1
        self.used.add(f"{hint}_{k}")
        return f"{hint}_{k}"

    def own_name(self, node: torch.fx.Node) -> str:
        """The fx node's own name for the IR node that carries its result."""
        if node.name not in self.used:
            self.used.add(node.name)
            return node.name
        return self.fresh(node.name)

    def type(self, ref: Ref) -> TensorType:
        return self.types[ref.name]

    def shape(self, ref: Ref) -> tuple:
        return self.types[ref.name].shape

    def dtype(self, ref: Ref) -> str:
        return self.types[ref.name].dtype

    def tensor_type(self, val, what: str = "a value") -> TensorType:
        return TensorType(self.symbols.shape(val.shape), ir_dtype(val.dtype, what))

    def result(self, node: torch.fx.Node | None = None, index: int | None = None) -> TensorType:
        """The (shape, dtype) of an fx node's result, from its FakeTensor meta value."""
        node = node or self.current
        val = node.meta.get("val")
        if index is not None:
            val = val[index]
        if not isinstance(val, torch.Tensor):
            raise CaptureError(f"{self.where(node)}: expected a tensor result, got {type(val).__name__}")
        return self.tensor_type(val, self.where(node))

    def where(self, node: torch.fx.Node | None = None) -> str:
        node = node or self.current
        if node is None:
            return f"model {self.model_name}, capture"
        return f"model {self.model_name}, capture, op {op_name(node.target)} (node {node.name}{source_line(node)})"

    # ------------------------------------------------------------ emitting nodes

    def emit(self, op: str, inputs, shape, dtype: str, hint: str | None = None, **attrs) -> Ref:
        hint = hint or (f"{self.current.name}_{op}" if self.current is not None else op)
        name = self.fresh(hint)
        t = TensorType(tuple(sympy.sympify(s) for s in shape), dtype)
        self.nodes.append(Node(name, op, tuple(r.name for r in inputs), t, make_attrs(**attrs)))
        self.types[name] = t
        return Ref(name)

    def cast(self, x: Ref, dtype: str) -> Ref:
        if self.dtype(x) == dtype:
            return x
        return self.emit("cast", [x], self.shape(x), dtype)

    def reshape(self, x: Ref, shape) -> Ref:
        shape = tuple(shape)
        if tuple(self.shape(x)) == shape:
            return x
        return self.emit("reshape", [x], shape, self.dtype(x))

    def broadcast(self, x: Ref, shape) -> Ref:
        """reshape (leading size-1 dims) + expand so that x has exactly `shape`."""
        shape = tuple(shape)
        src = tuple(self.shape(x))
        if src == shape:
            return x
        if len(src) > len(shape):
            raise CaptureError(f"{self.where()}: cannot broadcast {src} to {shape}")
        if len(src) < len(shape):
            x = self.reshape(x, (sympy.Integer(1),) * (len(shape) - len(src)) + src)
            src = tuple(self.shape(x))
            if src == shape:
                return x
        for a, b in zip(src, shape):
            if a != b and a != 1 and not self.symbols.provably_equal(a, b):
                raise CaptureError(f"{self.where()}: cannot broadcast {src} to {shape}")
        return self.emit("expand", [x], shape, self.dtype(x))

    def full(self, value, shape, dtype: str) -> Ref:
        return self.emit("full", [], shape, dtype, value=scalar_value(value, dtype, self, symbolic=True))

    def operand(self, x, shape, dtype: str) -> Ref:
        """A tensor or Python scalar as a pointwise operand of exactly (shape, dtype)."""
        if isinstance(x, Ref):
            return self.broadcast(self.cast(x, dtype), shape)
        return self.full(x, shape, dtype)

    def pointwise(self, op: str, args, shape, dtype: str, operand_dtype: str | None = None, **attrs) -> Ref:
        ins = [self.operand(a, shape, operand_dtype or dtype) for a in args]
        return self.emit(op, ins, shape, dtype, **attrs)

    # ------------------------------------------------------------ helpers for lowerings

    def meta_like(self, x):
        """A meta tensor with x's dtype and rank (for torch.result_type); a size expression (a
        comparison with a symbolic size: EnCodec's padding) promotes as the Python int it is."""
        if isinstance(x, Ref):
            t = self.type(x)
            return torch.empty((1,) * t.rank, dtype=torch_dtype(t.dtype), device="meta")
        if isinstance(x, sympy.Basic):  # sizes are integers
            return 0
        return x

    def common_dtype(self, *args) -> str:
        tensors = [self.meta_like(a) for a in args]
        if len(tensors) == 1:
            t = tensors[0]
            return ir_dtype(t.dtype if isinstance(t, torch.Tensor) else torch.tensor(t).dtype)
        dt = torch.result_type(tensors[0], tensors[1])
        for t in tensors[2:]:
            dt = torch.promote_types(dt, torch.result_type(t, torch.empty((), dtype=dt, device="meta")))
        return ir_dtype(dt, self.where())

    def dims(self, dims, rank: int) -> tuple[int, ...]:
        """Normalize reduction dims: None/[] = all, negative wrapped, sorted."""
        if dims is None:
            return tuple(range(rank))
        if isinstance(dims, int):
            dims = [dims]
        dims = list(dims)
        if not dims:
            return tuple(range(rank))
        return tuple(sorted({wrap_dim(d, rank) for d in dims}))

    def static(self, value) -> int:
        """A size that must be a static integer for this lowering (else: extern)."""
        expr = self.symbols.size(value) if not isinstance(value, sympy.Expr) else value
        if not expr.is_Integer:
            raise NoLowering(f"symbolic size {expr}")
        return int(expr)


def wrap_dim(d: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= d < r:
        raise CaptureError(f"dim {d} out of range for rank {rank}")
    return d % r


def scalar_value(value, dtype: str, cx: GraphBuilder | None = None, *, symbolic: bool = False):
    """A Python scalar as the `value` attr of a `full` node of `dtype`.

    With symbolic=True a size expression of the graph's symbols (a count such as
    `s0*s1`) becomes a `Size` attr: an integer evaluated at run time (docs/IR.md).
    """
    if isinstance(value, sympy.Expr):
        if not value.is_Number:
            if not symbolic or not value.is_integer:
                raise NoLowering(f"symbolic scalar {value}")
            return Size(expr_str(value))
        value = int(value) if value.is_Integer else float(value)
    if isinstance(value, torch.Tensor):
        raise NoLowering("tensor used as a scalar")
    if dtype == "bool":
        return bool(value)
    if is_float(dtype):
        return float(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise NoLowering(f"non-finite value {value} for integer dtype")
    return int(value)

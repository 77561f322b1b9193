"""A reference interpreter for pipec Graphs: the executable meaning of docs/IR.md.

`run_graph(graph, tensors)` evaluates a Graph node by node with torch ops and
checks the IR's invariants while doing so (no implicit broadcasting, pre-promoted
dtypes, every result of exactly its declared shape and dtype). Other stages use
it to check that what they produce means what the Graph means.

float16/bfloat16 values are computed in float32 and rounded to the node's dtype
after every node (the result of each node is what eager PyTorch would produce).
"""

from __future__ import annotations

import math

import sympy
import torch

import pipec_ir
from pipec_ir import Device, Dtype, Graph, Node, Ref, Size
from pipec_ir.ops import (
    COLLECTIVE, COMPARISONS, LOGICAL, OPS, SCAN_COMBINES, SCATTER_REDUCES, collective_call, reduction_of,
)

from . import philox
from .dtypes import IR_TO_TORCH, is_float


class IRSemanticsError(AssertionError):
    """The graph breaks a rule of docs/IR.md (found while evaluating it)."""


def _gelu(x, node):
    return torch.nn.functional.gelu(x, approximate=node.attr("approximate"))


UNARY = {
    "identity": lambda x: x.clone(), "neg": torch.neg, "abs": torch.abs, "exp": torch.exp,
    "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2, "log1p": torch.log1p,
    "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal, "sin": torch.sin,
    "cos": torch.cos, "tan": torch.tan, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "silu": torch.nn.functional.silu, "erf": torch.erf, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "trunc": torch.trunc, "sign": torch.sign, "logical_not": torch.logical_not,
    "bitwise_not": torch.bitwise_not, "isnan": torch.isnan, "isinf": torch.isinf, "atan": torch.atan,
    "asin": torch.asin, "acos": torch.acos, "sinh": torch.sinh, "cosh": torch.cosh, "square": torch.square,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "truediv_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"), "pow": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt,
    "le": torch.le, "gt": torch.gt, "ge": torch.ge, "logical_and": torch.logical_and,
    "logical_or": torch.logical_or, "logical_xor": torch.logical_xor, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor, "remainder": torch.remainder,
    "fmod": torch.fmod, "atan2": torch.atan2,
}
_HALF = (torch.float16, torch.bfloat16)


def _compute(t: torch.Tensor) -> torch.Tensor:
    return t.float() if t.dtype in _HALF else t


def _prod(x, dims, keepdim, out):
    r = _compute(x)
    for d in sorted(dims, reverse=True):
        r = torch.prod(r, dim=d, keepdim=keepdim)
    return r.to(out)


# The reference's row per reduction op (pipec_ir.ops.Reduction says what each means):
# (input, dims, keepdim, result dtype) -> result; for an indexed op, torch's pick along a dim.
TORCH_REDUCTIONS = {
    "sum": lambda x, dims, keepdim, out: torch.sum(_compute(x), dim=dims, keepdim=keepdim).to(out),
    "prod": _prod,
    "max": lambda x, dims, keepdim, out: torch.amax(x, dim=dims, keepdim=keepdim),
    "min": lambda x, dims, keepdim, out: torch.amin(x, dim=dims, keepdim=keepdim),
    "any": lambda x, dims, keepdim, out: torch.amax(x.bool().to(torch.uint8), dim=dims, keepdim=keepdim).bool(),
    "argmax": torch.argmax,
    "argmin": torch.argmin,
}

# The reference's row per scan combine (pipec_ir.ops.SCAN_COMBINES): (values, dim) -> inclusive scan.
TORCH_SCANS = {"add": torch.cumsum, "mul": torch.cumprod, "logaddexp": torch.logcumsumexp}


class Evaluator:
    def __init__(self, graph: Graph, tensors, *, strict: bool = True) -> None:
        self.graph = graph
        self.strict = strict
        self.env: dict[str, object] = {}
        self.sizes: dict[sympy.Symbol, int] = {}
        tensors = list(tensors)
        if len(tensors) != len(graph.inputs):
            raise ValueError(f"graph {graph.name} takes {len(graph.inputs)} inputs, got {len(tensors)}")
        self.device = tensors[0].device if tensors else torch.device("cpu")
        for gi, t in zip(graph.inputs, tensors):
            self._bind(gi.name, gi.type, t)
            self.env[gi.name] = t.contiguous()

    # ---------------------------------------------------------------- sizes

    def _bind(self, name, type_, t):
        if len(type_.shape) != t.dim():
            raise ValueError(f"input {name}: expected rank {len(type_.shape)}, got shape {tuple(t.shape)}")
        for expr, size in zip(type_.shape, t.shape):
            if isinstance(expr, sympy.Symbol):
                old = self.sizes.setdefault(expr, int(size))
                if old != int(size):
                    raise ValueError(f"input {name}: size {expr} is {old} elsewhere but {size} here")
        if str(IR_TO_TORCH[type_.dtype]) != str(t.dtype):
            raise ValueError(f"input {name}: expected {type_.dtype}, got {t.dtype}")

    def int_attr(self, value):
        """An attribute that may be a `Size` (a size expression): its value for these inputs."""
        return self.size(value.value) if isinstance(value, Size) else value

    def size(self, expr) -> int:
        value = sympy.sympify(expr).subs(self.sizes)
        if not value.is_Integer:
            raise ValueError(f"size {expr} is not determined by the input shapes")
        return int(value)

    def shape(self, type_) -> tuple[int, ...]:
        return tuple(self.size(s) for s in type_.shape)

    # ---------------------------------------------------------------- checks

    def fail(self, node: Node, msg: str):
        raise IRSemanticsError(f"graph {self.graph.name}, node {node.name} ({node.op}): {msg}")

    def check_operands(self, node: Node, args: list[torch.Tensor]) -> None:
        if not self.strict:
            return
        want = self.shape(node.type)
        for a in args:
            if tuple(a.shape) != want:
                self.fail(node, f"operand shape {tuple(a.shape)} != node shape {want} (no implicit broadcasting)")
        dtypes = {a.dtype for a in args}
        op, out = node.op, IR_TO_TORCH[node.type.dtype]
        if op == "where":
            if args[0].dtype != torch.bool:
                self.fail(node, f"where condition has dtype {args[0].dtype}, not bool")
            if args[1].dtype != out or args[2].dtype != out:
                self.fail(node, "where branches must have the node's dtype")
        elif op in COMPARISONS or op in ("cast",):
            if len(dtypes) > 1:
                self.fail(node, f"comparison operands have different dtypes {dtypes}")
        elif op in LOGICAL:
            if dtypes != {torch.bool}:
                self.fail(node, f"logical operands must be bool, got {dtypes}")
        else:
            if dtypes != {out}:
                self.fail(node, f"operands {dtypes} do not have the node's dtype {out} (capture must cast)")

    # ---------------------------------------------------------------- evaluation

    def run(self) -> list:
        for node in self.graph.nodes:
            self.env[node.name] = self.eval_node(node)
        return [None if o is None else self.env[o] for o in self.graph.outputs]

    def eval_node(self, node: Node):
        kind = OPS[node.op].kind
        args = [self.env[i] for i in node.inputs]
        if node.op == "extern":
            return self.extern(node)
        if kind == COLLECTIVE:  # through torch.distributed, as the runtime runs it
            target, call_args = collective_call(node)
            return self.check_result(node, resolve_overload(target)(*self.decode(call_args)))
        if node.op == "getitem":
            result = args[0][node.attr("index")]
        elif node.op == "rand":
            seed, position = args
            if self.strict and (seed.dtype, position.dtype) != (torch.int64, torch.int64):
                self.fail(node, f"rand operands must be int64, got {seed.dtype}, {position.dtype}")
            result = philox.rand(seed, position + int(node.attr("offset")), node.attr("distribution"))
        elif kind == "pointwise":
            self.check_operands(node, args)
            result = self.pointwise(node, args)
        elif kind == "reduction":
            result = self.reduction(node, args[0])
        elif kind == "scan":
            result = self.scan(node, args[0])
        elif kind == "view":
            result = self.view(node, args[0])
        elif kind == "creation":
            result = self.creation(node)
        elif node.op == "take":
            result = self.take(node, *args)
        elif node.op == "scatter":
            result = self.scatter(node, *args)
        elif kind == "matmul":
            a, b = args
            if self.strict and a.dtype != b.dtype:
                self.fail(node, f"matmul operands of different dtypes {a.dtype}, {b.dtype}")
            result = torch.mm(a, b) if node.op == "mm" else torch.bmm(a, b)
        else:  # pragma: no cover - verify() rejects unknown ops
            self.fail(node, "unknown op kind")
        return self.check_result(node, result)

    def check_result(self, node: Node, result):
        want_shape = self.shape(node.type)
        want_dtype = IR_TO_TORCH[node.type.dtype]
        if tuple(result.shape) != want_shape:
            self.fail(node, f"result shape {tuple(result.shape)} != declared {want_shape}")
        if result.dtype != want_dtype:
            self.fail(node, f"result dtype {result.dtype} != declared {want_dtype}")
        return result

    def pointwise(self, node: Node, args):
        out = IR_TO_TORCH[node.type.dtype]
        if node.op == "cast":
            return args[0].to(out)
        if node.op == "where":
            c, a, b = args
            return torch.where(c, a, b).to(out)
        xs = [_compute(a) for a in args]
        if node.op == "gelu":
            r = _gelu(xs[0], node)
        elif node.op in UNARY:
            r = UNARY[node.op](xs[0])
        elif node.op == "div" and not is_float(node.type.dtype):
            r = torch.div(xs[0], xs[1], rounding_mode="trunc")  # integer div: C semantics
        else:
            r = BINARY[node.op](xs[0], xs[1])
        return r.to(out)

    def reduction(self, node: Node, x):
        dims, keepdim = tuple(node.attr("dims")), bool(node.attr("keepdim"))
        out = IR_TO_TORCH[node.type.dtype]
        if self.strict:
            if list(dims) != sorted(set(dims)) or any(d < 0 or d >= x.dim() for d in dims):
                self.fail(node, f"dims {dims} must be sorted, unique, non-negative and < rank {x.dim()}")
            if reduction_of(node.op).result_dtype is None and x.dtype != out:
                self.fail(node, f"{node.op} input dtype {x.dtype} != output dtype {out} (capture casts first)")
        fn = TORCH_REDUCTIONS[node.op]
        if not reduction_of(node.op).indexed:
            return fn(x, dims, keepdim, out)
        # an index over one dim (several dims: over their row-major flattening)
        perm = [d for d in range(x.dim()) if d not in dims] + list(dims)
        xp = x.permute(perm)
        kept = xp.shape[: x.dim() - len(dims)]
        flat = xp.reshape(*kept, -1)
        r = fn(flat, dim=-1)
        if keepdim:
            r = r.reshape(self.shape(node.type))
        return r

    def scan(self, node: Node, x):
        """Inclusive scan along `dim`: half types in float32, integers in int64 (docs/IR.md, "Scans")."""
        dim, combine = node.attr("dim"), node.attr("combine")
        out = IR_TO_TORCH[node.type.dtype]
        if self.strict:
            if not 0 <= dim < x.dim():
                self.fail(node, f"scan dim {dim} must be non-negative and < rank {x.dim()}")
            if x.dtype != out:
                self.fail(node, f"scan input dtype {x.dtype} != output dtype {out} (capture casts first)")
        work = _compute(x) if is_float(node.type.dtype) else x.to(torch.int64)
        if combine in TORCH_SCANS and (work.is_floating_point() or not SCAN_COMBINES[combine].floats_only):
            return TORCH_SCANS[combine](work, dim).to(out)
        self.fail(node, f"unknown scan combine {combine!r} for dtype {x.dtype}")

    def view(self, node: Node, x):
        shape = self.shape(node.type)
        if node.op == "reshape":
            if math.prod(shape) != x.numel():
                self.fail(node, f"reshape of {x.numel()} elements to {shape}")
            return x.reshape(shape)
        if node.op == "permute":
            dims = tuple(node.attr("dims"))
            if sorted(dims) != list(range(x.dim())):
                self.fail(node, f"permute dims {dims} for rank {x.dim()}")
            return x.permute(dims)
        if node.op == "expand":
            if self.strict and x.dim() != len(shape):
                self.fail(node, f"expand from rank {x.dim()} to rank {len(shape)} (reshape first)")
            return x.expand(shape)
        if node.op == "slice":
            dim, start, step = node.attr("dim"), self.int_attr(node.attr("start")), node.attr("step")
            length = shape[dim]
            if length == 0:
                return x.narrow(dim, 0, 0)
            last = start + step * (length - 1)
            if start < 0 or last >= x.shape[dim]:
                self.fail(node, f"slice reads [{start}:{last + 1}:{step}] of a dim of size {x.shape[dim]}")
            return torch.ops.aten.slice.Tensor(x, dim, start, last + 1, step)
        if node.op == "select":
            dim, index = node.attr("dim"), self.int_attr(node.attr("index"))
            if not 0 <= index < x.shape[dim]:
                self.fail(node, f"select index {index} out of range {x.shape[dim]}")
            return x.select(dim, index)
        self.fail(node, "unknown view")

    def take(self, node: Node, src, index):
        if self.strict:
            if index.dtype not in (torch.int64, torch.int32) or tuple(index.shape) != self.shape(node.type):
                self.fail(node, f"take index must be an integer tensor of the node's shape, got {index.dtype} "
                                f"{tuple(index.shape)}")
            if src.dtype != IR_TO_TORCH[node.type.dtype]:
                self.fail(node, f"take source dtype {src.dtype} != node dtype {node.type.dtype}")
            if index.numel() and not (0 <= int(index.min()) and int(index.max()) < src.numel()):
                self.fail(node, f"take index outside [0, {src.numel()})")
        return src.reshape(-1)[index.long()]

    def scatter(self, node: Node, base, index, src):
        """base with src written (reduce "none") or accumulated at base's flat positions `index`."""
        reduce = node.attr("reduce")
        if self.strict:
            if index.dtype != torch.int64 or tuple(index.shape) != tuple(src.shape):
                self.fail(node, f"scatter index must be int64 of src's shape {tuple(src.shape)}, got {index.dtype} "
                                f"{tuple(index.shape)}")
            if base.dtype != IR_TO_TORCH[node.type.dtype] or src.dtype != base.dtype:
                self.fail(node, f"scatter self/src dtypes {base.dtype}/{src.dtype} != node dtype {node.type.dtype}")
            if index.numel() and not (0 <= int(index.min()) and int(index.max()) < base.numel()):
                self.fail(node, f"scatter index outside [0, {base.numel()})")
            if reduce not in SCATTER_REDUCES:
                self.fail(node, f"unknown scatter reduce {reduce!r}")
        flat = base.reshape(-1).clone()
        if reduce == "none":
            flat[index.reshape(-1)] = src.reshape(-1)
        else:
            flat.scatter_reduce_(0, index.reshape(-1), src.reshape(-1), reduce, include_self=True)
        return flat.reshape(base.shape)

    def creation(self, node: Node):
        shape = self.shape(node.type)
        dtype = IR_TO_TORCH[node.type.dtype]
        if node.op == "full":
            return torch.full(shape, self.int_attr(node.attr("value")), dtype=dtype, device=self.device)
        dim, start, step = node.attr("dim"), node.attr("start"), node.attr("step")
        work = torch.float64 if is_float(node.type.dtype) else torch.int64
        idx = torch.arange(shape[dim], dtype=work, device=self.device)
        vals = (start + step * idx).to(dtype)
        view = [1] * len(shape)
        view[dim] = shape[dim]
        return vals.reshape(view).expand(shape).contiguous()

    # ---------------------------------------------------------------- externs

    def extern(self, node: Node):
        target = node.attr("target")
        fn = resolve_overload(target)
        args = self.decode(node.attr("args"))
        kwargs = {k: self.decode(v) for k, v in node.attr("kwargs")}
        result = fn(*args, **kwargs)
        if pipec_ir.is_multi_result(node):
            return tuple(result)
        return self.check_result(node, result)

    def decode(self, v):
        if isinstance(v, Ref):
            return self.env[v.name]
        if isinstance(v, Dtype):
            return IR_TO_TORCH[v.name]
        if isinstance(v, Device):
            return self.device
        if isinstance(v, Size):
            return self.size(v.value)
        if isinstance(v, tuple):
            return [self.decode(x) for x in v]
        return v


def resolve_overload(target: str):
    """"aten.add.Tensor" -> torch.ops.aten.add.Tensor."""
    parts = target.split(".")
    if len(parts) != 3:
        raise ValueError(f"not an ATen overload name: {target!r}")
    ns, op, overload = parts
    return getattr(getattr(getattr(torch.ops, ns), op), overload)


def run_graph(graph: Graph, tensors, *, strict: bool = True) -> list:
    """Evaluate `graph` on `tensors` (one per graph input); returns the outputs (None stays None).

    strict=True also checks the IR's operand rules (shapes, dtypes) and raises
    IRSemanticsError naming the node that breaks one.
    """
    return Evaluator(graph, tensors, strict=strict).run()

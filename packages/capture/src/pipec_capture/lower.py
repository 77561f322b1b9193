"""Lower an ATen-level torch.fx GraphModule into a `pipec_ir.Graph`.

The work is driven by `LOWERINGS`, a table keyed by ATen overload name
(`str(node.target)`, e.g. "aten.add.Tensor"). A lowering receives the `Lowerer`,
the fx node and the node's arguments with every tensor replaced by a
`pipec_ir.Ref` to its IR value, and returns the IR value(s) of the result:
a `Ref`, a tuple of `Ref`s (multi-result ops such as native_layer_norm), or a
plain Python value (symbolic sizes). A lowering may emit many IR nodes and may
raise `NoLowering` to fall back to an `extern` node for that op.

Everything the IR forbids is made explicit here (docs/IR.md): broadcasts become
`reshape` + `expand`, Python scalars become `full` nodes, dtype promotion becomes
`cast` nodes.
"""

from __future__ import annotations

import math
import operator
import sys
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

import sympy
import torch
import torch.fx

import pipec_ir
from pipec_ir import Device, Dtype, Graph, GraphInput, Node, Ref, Size, TensorType, make_attrs, size_attr
from pipec_ir.symbolic import FloorDiv, expr_str, numel

from .dtypes import acc_dtype, ir_dtype, is_float, torch_dtype
from .errors import CaptureError
from .symbols import SymbolTable

Lowering = Callable[..., Any]


class NoLowering(Exception):
    """Raised by a lowering that cannot handle this particular call: the op becomes an extern."""


@dataclass(frozen=True)
class MultiExtern:
    """The env value of a multi-result extern: fx getitem nodes become IR getitem nodes."""
    name: str
    results: tuple  # per result: TensorType or None (non-tensor result)


# Ops for which a vendor library is the right answer: extern with reason "library".
LIBRARY_OPS = frozenset({
    "convolution", "_convolution", "convolution_backward", "cudnn_convolution",
    "cudnn_convolution_transpose", "mkldnn_convolution", "miopen_convolution",
    "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot", "matmul", "linear",
    "_int_mm", "_scaled_mm", "_addmm_activation",
    "scaled_dot_product_attention", "_scaled_dot_product_attention_math",
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_fused_attention_overrideable",
    "_scaled_dot_product_flash_attention_backward",
    "_scaled_dot_product_flash_attention_for_cpu_backward",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_cudnn_attention_backward",
    "_flash_attention_forward", "_flash_attention_backward",
    "_efficient_attention_forward", "_efficient_attention_backward",
})

_DEFAULT_LIKE = {torch.strided, torch.contiguous_format, torch.preserve_format}
_DROPPABLE_KWARGS = ("layout", "memory_format", "pin_memory")


def op_name(target) -> str:
    """The overload name used as the lowering-table key: "aten.add.Tensor"."""
    if target is operator.getitem:
        return "getitem"
    return str(target)


def base_name(target: str) -> str:
    """"aten.convolution.default" -> "convolution"."""
    parts = target.split(".")
    return parts[1] if len(parts) >= 2 else target


def extern_reason(target: str) -> str:
    return "library" if base_name(target) in LIBRARY_OPS else f"no lowering for {target}"


# ====================================================================== the lowerer


def source_line(node: torch.fx.Node) -> str:
    """' at FILE:LINE' of the user code that made `node` (torch records its stack), or ''."""
    import os
    import re

    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    frames = re.findall(r'File "([^"]+)", line (\d+)', str(node.meta.get("stack_trace") or ""))
    user = [(f, line) for f, line in frames if not os.path.abspath(f).startswith(torch_dir)]
    return f" at {user[-1][0]}:{user[-1][1]}" if user else ""


def size_only_placeholders(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
    """The SymInt arguments of `gm` that carry a size no tensor argument has as a dimension (an
    AOTAutograd backward graph takes the forward input's sizes it needs, such as the reduced
    dim of `x.sum(1)`, as ints). The graph takes each as a 1-D int8 input of that length, after
    its tensor inputs and in argument order, whose values are never read: a runtime binds sizes
    from input shapes (docs/IR.md, "Graph"). Each symbol once; an unbacked one too (the
    forward's slice length u0, which its backward takes: SymbolTable.input_size)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    dims = {d.node.expr for n in placeholders if isinstance(n.meta.get("val"), torch.Tensor)
            for d in n.meta["val"].shape if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol}
    out = []
    for n in placeholders:
        val = n.meta.get("val")
        if isinstance(val, torch.SymInt) and val.node.expr.is_Symbol and val.node.expr not in dims:
            dims.add(val.node.expr)
            out.append(n)
    return out


class Lowerer:
    def __init__(self, gm: torch.fx.GraphModule, *, name: str = "graph",
                 input_specs: dict[str, tuple[str, str]] | None = None,
                 fullgraph: bool = False, model_name: str | None = None) -> None:
        self.gm = gm
        self.name = name
        self.model_name = model_name or name
        self.input_specs = input_specs or {}
        self.fullgraph = fullgraph
        self.symbols = SymbolTable()
        self.inputs: list[GraphInput] = []
        self.nodes: list[Node] = []
        self.types: dict[str, TensorType] = {}
        self.env: dict[torch.fx.Node, Any] = {}
        self.used: set[str] = set()
        self.reserved = {n.name for n in gm.graph.nodes}
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
            if a != b and a != 1:
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
        """A meta tensor with x's dtype and rank (for torch.result_type)."""
        if isinstance(x, Ref):
            t = self.type(x)
            return torch.empty((1,) * t.rank, dtype=torch_dtype(t.dtype), device="meta")
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

    # ------------------------------------------------------------ the walk

    def run(self) -> Graph:
        outputs: tuple = ()
        for node in self.gm.graph.nodes:
            self.current = node
            try:
                if node.op == "placeholder":
                    self.placeholder(node)
                elif node.op == "call_function":
                    self.call_function(node)
                elif node.op == "output":
                    outputs = self.output(node)
                elif node.op == "get_attr":
                    self.get_attr(node)
                else:
                    raise CaptureError(f"{self.where(node)}: fx node kind {node.op!r} is not supported")
            except CaptureError as e:  # a size's error (symbols.py) does not know the node: name it
                if str(e).startswith(f"model {self.model_name}"):
                    raise
                raise CaptureError(f"{self.where(node)}: {e}") from e
        self.current = None
        for node in size_only_placeholders(self.gm):  # after the tensors, in argument order
            size = self.symbols.size(node.meta["val"])
            name = node.name if node.name not in self.used else self.fresh(node.name)
            self.used.add(name)
            self.inputs.append(GraphInput(name=name, type=TensorType((size,), "int8")))
        self.nodes = eliminate_dead_nodes(self.nodes, outputs)
        graph = Graph(name=self.name, inputs=tuple(self.inputs), nodes=tuple(self.nodes),
                      outputs=outputs, symbols=self.symbols.ranges)
        try:
            return pipec_ir.verify(graph)
        except pipec_ir.VerifyError as e:
            raise CaptureError(f"model {self.model_name}, capture: lowered graph is invalid: {e}") from e

    def placeholder(self, node: torch.fx.Node) -> None:
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            name, role = self.input_specs.get(node.name, (node.name, "input"))
            t = self.tensor_type(val, f"input {node.name}")
            self.used.add(name)
            self.inputs.append(GraphInput(name=name, type=t, role=role))
            self.types[name] = t
            self.env[node] = Ref(name)
        elif isinstance(val, (torch.SymInt, int, float, bool)) or val is None:
            # a non-tensor input (a SymInt size): its value is a size expression (a size-only
            # graph input where no tensor input has it: size_only_placeholders)
            if isinstance(val, torch.SymInt):
                self.env[node] = self.symbols.input_size(val)
            else:
                self.env[node] = self.symbols.size(val) if isinstance(val, int) else val
        elif isinstance(val, torch.SymBool) and self.symbols.mentions_defined(val):
            # torch 2.11's backward takes the forward's checks of a defined size (`u0 >= 0`) for
            # its asserts, which hold by the definition: no input (checks_a_defined_size)
            self.env[node] = None
        else:
            raise CaptureError(f"{self.where(node)}: input of type {type(val).__name__} is not supported")

    def get_attr(self, node: torch.fx.Node) -> None:
        """A tensor constant of the fx graph: a one-element constant becomes a `full` literal;
        a larger one becomes a trailing graph input (role "buffer", named by its attribute
        path) whose value `constant_bindings(gm, graph)` returns."""
        try:
            value = _fetch_attr(self.gm, node.target)
        except AttributeError:
            raise CaptureError(f"{self.where(node)}: graph attribute {node.target!r} does not exist") from None
        if not isinstance(value, torch.Tensor):
            raise CaptureError(f"{self.where(node)}: graph attribute {node.target!r} is not a tensor")
        dtype = ir_dtype(value.dtype, self.where(node))
        if value.numel() == 1 and not isinstance(value, torch._subclasses.FakeTensor):
            shape = tuple(sympy.Integer(s) for s in value.shape)
            # AOTAutograd calls the compiler with its fake mode active: read the real value outside it
            with torch._subclasses.fake_tensor.unset_fake_temporarily():
                item = value.item()
            self.env[node] = self.emit("full", [], shape, dtype, hint=node.name, value=scalar_value(item, dtype))
            return
        # named by its attribute path, which is how constant_bindings finds its value again
        name = node.target
        if name in self.used:
            raise CaptureError(f"{self.where(node)}: graph attribute {name!r} has the name of another input")
        self.used.add(name)
        t = TensorType(tuple(sympy.Integer(s) for s in value.shape), dtype)
        self.inputs.append(GraphInput(name=name, type=t, role="buffer"))
        self.types[name] = t
        self.env[node] = Ref(name)

    def map_arg(self, a):
        if isinstance(a, torch.fx.Node):
            if a not in self.env:
                raise CaptureError(f"{self.where()}: argument {a.name} has no value")
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.map_arg(x) for x in a)
        if isinstance(a, dict):
            return {k: self.map_arg(v) for k, v in a.items()}
        if isinstance(a, torch.SymInt):
            return self.symbols.size(a)
        if isinstance(a, (torch.SymFloat, torch.SymBool)):
            raise NoLowering("symbolic float/bool argument")
        return a

    def call_function(self, node: torch.fx.Node) -> None:
        target = op_name(node.target)
        val = node.meta.get("val")
        if target == "getitem":
            self.env[node] = self.getitem(node)
            return
        if self.checks_a_defined_size(node, target, val):
            self.env[node] = None
            return
        if not isinstance(node.target, torch._ops.OpOverload) and not isinstance(val, torch.Tensor) \
                and not (isinstance(val, (tuple, list)) and val):
            # Python arithmetic on sizes (operator.mul on SymInts, sym_size...): a size expression
            self.env[node] = self.scalar_node(node, val)
            return
        if target in ("aten.sym_size.int", "aten.sym_numel.default", "aten.sym_stride.int",
                      "aten.sym_storage_offset.default"):  # sizes read off a traced tensor (torch 2.11: offsets too)
            self.env[node] = self.scalar_node(node, val)
            return
        lowering = LOWERINGS.get(target)
        mark = len(self.nodes)
        if lowering is not None:
            try:
                args = self.map_arg(node.args)
                kwargs = self.map_arg(dict(node.kwargs))
                value = lowering(self, node, *args, **kwargs)
                self.env[node] = self.name_result(node, value, mark)
                return
            except NoLowering as why:
                for n in self.nodes[mark:]:
                    self.used.discard(n.name)
                    self.types.pop(n.name, None)
                del self.nodes[mark:]
                reason = f"no lowering for {target}: {why}"
        else:
            reason = extern_reason(target)
        self.env[node] = self.extern(node, target, reason)

    # torch's runtime checks of an unbacked size: `u0 >= 0` and `u0 <= s1` (SymBool nodes) and
    # the asserts and range constraints that consume them
    SIZE_CHECKS = ("aten._assert_scalar.default", "aten.sym_constrain_range_for_size.default",
                   "aten.sym_constrain_range.default")

    def checks_a_defined_size(self, node: torch.fx.Node, target: str, val) -> bool:
        """A node that only checks a size `define_slice_length` defined: it holds by that
        definition (a slice length is in [0, the dim's size]), so it lowers to nothing."""
        if isinstance(val, torch.SymBool):
            return self.symbols.mentions_defined(val)
        if target not in self.SIZE_CHECKS or not node.args:
            return False
        first = node.args[0]
        if not isinstance(first, torch.fx.Node):
            return False
        dropped_check = isinstance(first.meta.get("val"), torch.SymBool) and self.env.get(first, False) is None
        return dropped_check or self.symbols.mentions_defined(first.meta.get("val"))

    def scalar_node(self, node, val):
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            return self.symbols.size(val)
        if isinstance(val, (float, bool)):
            return val
        raise CaptureError(
            f"{self.where(node)}: produces a {type(val).__name__}, not a tensor; pipec cannot compile "
            "data-dependent Python values - move .item()/.tolist() out of the compiled region")

    def name_result(self, node, value, mark: int):
        """Give the last node a lowering emitted the fx node's name."""
        if isinstance(value, Ref) and len(self.nodes) > mark and self.nodes[-1].name == value.name \
                and value.name != node.name and node.name not in self.used:
            last = self.nodes[-1]
            self.used.discard(last.name)
            self.used.add(node.name)
            t = self.types.pop(last.name)
            self.types[node.name] = t
            self.nodes[-1] = Node(node.name, last.op, last.inputs, last.type, last.attrs)
            return Ref(node.name)
        return value

    def getitem(self, node: torch.fx.Node):
        src, index = node.args
        value = self.env[src]
        if isinstance(value, MultiExtern):
            t = value.results[index] if index < len(value.results) else None
            if t is None:
                if node.users:
                    raise CaptureError(
                        f"{self.where(src)}: result {index} of the extern op is not a tensor but is used; "
                        "pipec cannot compile this - run it outside the compiled region")
                return None
            name = self.own_name(node)
            self.nodes.append(Node(name, "getitem", (value.name,), t, make_attrs(index=index)))
            self.types[name] = t
            return Ref(name)
        if isinstance(value, (tuple, list)):
            return value[index]
        raise CaptureError(f"{self.where(node)}: getitem on a non-tuple value")

    def output(self, node: torch.fx.Node) -> tuple:
        outs = node.args[0]
        if not isinstance(outs, (tuple, list)):
            outs = (outs,)
        result = []
        for o in outs:
            v = self.env.get(o) if isinstance(o, torch.fx.Node) else None
            result.append(v.name if isinstance(v, Ref) else None)
        return tuple(result)

    # ------------------------------------------------------------ externs

    def extern(self, node: torch.fx.Node, target: str, reason: str):
        if self.fullgraph and reason != "library":
            raise CaptureError(
                f"{self.where(node)}: {target} has no pipec lowering (fullgraph=True); "
                f"add a row for {target!r} to pipec_capture.LOWERINGS, or compile with fullgraph=False "
                "to run it through PyTorch as an extern call")
        if not isinstance(node.target, torch._ops.OpOverload):
            raise CaptureError(
                f"{self.where(node)}: call to {target} is not an ATen op; pipec captures ATen graphs "
                "(through AOTAutograd or torch.export)")
        refs: list[str] = []
        args = tuple(self.extern_value(a, refs, node) for a in node.args)
        kwargs = []
        for k, v in node.kwargs.items():
            if k in _DROPPABLE_KWARGS and (v is None or v is False or v in _DEFAULT_LIKE):
                continue
            kwargs.append((k, self.extern_value(v, refs, node)))
        val = node.meta.get("val")
        inputs = tuple(Ref(r) for r in refs)
        attrs = dict(target=target, args=args, kwargs=tuple(kwargs), reason=reason)
        if isinstance(val, torch.Tensor):
            t = self.tensor_type(val, self.where(node))
            name = self.own_name(node)
            self.nodes.append(Node(name, "extern", tuple(r.name for r in inputs), t, make_attrs(**attrs)))
            self.types[name] = t
            return Ref(name)
        if isinstance(val, (tuple, list)) and any(isinstance(v, torch.Tensor) for v in val):
            results = tuple(self.tensor_type(v, self.where(node)) if isinstance(v, torch.Tensor) else None
                            for v in val)
            attrs["results"] = tuple(
                None if t is None else (tuple(expr_str(s) for s in t.shape), t.dtype) for t in results)
            name = self.own_name(node)
            t = TensorType((), "tuple")
            self.nodes.append(Node(name, "extern", tuple(r.name for r in inputs), t, make_attrs(**attrs)))
            return MultiExtern(name, results)
        raise CaptureError(
            f"{self.where(node)}: {target} does not return tensors (it returns "
            f"{type(val).__name__}); pipec cannot compile ops with non-tensor outputs - move it out of "
            "the compiled region")

    def extern_value(self, a, refs: list[str], node):
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            if isinstance(v, Ref):
                if v.name not in refs:
                    refs.append(v.name)
                return v
            if isinstance(v, (tuple, list)):
                return tuple(self.extern_value_plain(x, refs, node) for x in v)
            return self.extern_value_plain(v, refs, node)
        if isinstance(a, (list, tuple)):
            return tuple(self.extern_value(x, refs, node) for x in a)
        return self.extern_value_plain(a, refs, node)

    def extern_value_plain(self, a, refs, node):
        if isinstance(a, Ref):
            if a.name not in refs:
                refs.append(a.name)
            return a
        if a is None or isinstance(a, (bool, int, str)):
            return a
        if isinstance(a, float):
            return a
        if isinstance(a, torch.dtype):
            return Dtype(ir_dtype(a, self.where(node)))
        if isinstance(a, torch.device):
            return Device()
        if isinstance(a, (torch.layout, torch.memory_format)):
            if a in _DEFAULT_LIKE:
                return None
        if isinstance(a, (torch.SymInt, sympy.Expr)):
            return size_attr(self.symbols.size(a))  # a Size leaf when symbolic (docs/IR.md)
        if isinstance(a, (list, tuple)):
            return tuple(self.extern_value_plain(x, refs, node) for x in a)
        if isinstance(a, MultiExtern):
            raise CaptureError(f"{self.where(node)}: a multi-result value passed whole to an extern op")
        raise CaptureError(
            f"{self.where(node)}: argument {a!r} ({type(a).__name__}) cannot be stored in the IR; "
            "run this op outside the compiled region")


def _fetch_attr(gm: torch.nn.Module, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def constant_bindings(gm: torch.fx.GraphModule, graph: Graph) -> dict[str, torch.Tensor]:
    """Values of the graph inputs that came from get_attr constants of `gm` (role "buffer",
    named by the attribute's path): real tensors, read outside any active fake mode."""
    targets = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    out = {}
    with torch._subclasses.fake_tensor.unset_fake_temporarily():
        for i in graph.inputs:
            if i.role == "buffer" and i.name in targets:
                value = _fetch_attr(gm, i.name)
                if isinstance(value, torch.Tensor):
                    out[i.name] = value
    return out


def eliminate_dead_nodes(nodes: list[Node], outputs) -> list[Node]:
    """Drop nodes nothing reads (e.g. the unused mean/rstd of native_layer_norm).

    Externs are always kept (they may have effects pipec cannot see), except the seed of
    random ops when no live `rand` reads it (a dead randn in a backward graph).
    """
    from .lower_random import is_philox_seed

    live = {o for o in outputs if o is not None}
    kept = []
    for n in reversed(nodes):
        if n.name in live or (n.op == "extern" and not is_philox_seed(n)):
            live.update(n.inputs)
            kept.append(n)
    return kept[::-1]


def wrap_dim(d: int, rank: int) -> int:
    r = max(rank, 1)
    if not -r <= d < r:
        raise CaptureError(f"dim {d} out of range for rank {rank}")
    return d % r


def scalar_value(value, dtype: str, cx: Lowerer | None = None, *, symbolic: bool = False):
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


def lower_graph(gm: torch.fx.GraphModule, example_inputs=None, *, name: str = "graph",
                input_specs: dict[str, tuple[str, str]] | None = None, fullgraph: bool = False,
                model_name: str | None = None) -> Graph:
    """Lower an ATen fx GraphModule to a verified pipec Graph.

    input_specs: placeholder name -> (IR input name, role) for parameters/buffers.
    If some node lacks meta["val"], it is filled by fake-tensor propagation of example_inputs.
    """
    ensure_meta(gm, example_inputs)
    return Lowerer(gm, name=name, input_specs=input_specs, fullgraph=fullgraph, model_name=model_name).run()


def _returns_nothing(node: torch.fx.Node) -> bool:
    """An op with no results (a check such as aten._assert_tensor_metadata): it has no meta["val"] to miss."""
    return isinstance(node.target, torch._ops.OpOverload) and not node.target._schema.returns


def ensure_meta(gm: torch.fx.GraphModule, example_inputs) -> None:
    missing = any("val" not in n.meta for n in gm.graph.nodes
                  if n.op == "placeholder" or (n.op == "call_function" and not _returns_nothing(n)))
    if not missing:
        return
    if example_inputs is None:
        raise CaptureError("the fx graph has no meta['val'] and no example inputs were given")
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    # AOTAutograd may hand over fake tensors with symbolic sizes: their own mode owns the
    # ShapeEnv those symbols live in, and a fresh mode could not convert them.
    placeholder_vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    mode = detect_fake_mode([*example_inputs, *placeholder_vals])
    if mode is None:
        mode = FakeTensorMode(allow_non_fake_inputs=True)
    try:
        with mode:
            fake = [x if mode.is_our_fake(x) else mode.from_tensor(x) if isinstance(x, torch.Tensor) else x
                    for x in example_inputs]
        FakeTensorProp(gm, mode).propagate_dont_convert_inputs(*fake)
    except Exception as e:  # noqa: BLE001
        raise CaptureError(f"capture: cannot infer the shapes of the fx graph ({type(e).__name__}: {e}); "
                           "pass a graph produced by AOTAutograd or torch.export") from e


# ====================================================================== the lowerings table

LOWERINGS: dict[str, Lowering] = {}


def register(*names: str):
    def deco(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn
    return deco


# ------------------------------------------------------------ pointwise arithmetic


def _binary(op: str):
    def lower(cx: Lowerer, node, a, b, *, alpha=1):
        t = cx.result(node)
        if alpha != 1:
            b = cx.pointwise("mul", [b, alpha], t.shape, t.dtype)
        return cx.pointwise(op, [a, b], t.shape, t.dtype)
    lower.__name__ = f"lower_{op}"
    return lower


for _op in ("add", "sub"):
    register(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_binary(_op))
for _op in ("mul", "maximum", "minimum", "remainder", "fmod", "atan2", "bitwise_and", "bitwise_or",
            "bitwise_xor"):
    _f = _binary(_op)
    for _ov in ("Tensor", "Scalar", "default"):
        LOWERINGS[f"aten.{_op}.{_ov}"] = _f


@register("aten.rsub.Tensor", "aten.rsub.Scalar")
def lower_rsub(cx, node, a, b, *, alpha=1):
    t = cx.result(node)
    if alpha != 1:
        a = cx.pointwise("mul", [a, alpha], t.shape, t.dtype)
    return cx.pointwise("sub", [b, a], t.shape, t.dtype)


@register("aten.div.Tensor", "aten.div.Scalar", "aten.div.Tensor_mode", "aten.div.Scalar_mode")
def lower_div(cx, node, a, b, *, rounding_mode=None):
    t = cx.result(node)
    if rounding_mode is None:
        return cx.pointwise("div", [a, b], t.shape, t.dtype)
    if not is_float(t.dtype):
        if rounding_mode == "floor":
            return cx.pointwise("truediv_floor", [a, b], t.shape, t.dtype)
        raise NoLowering(f"integer division with rounding_mode={rounding_mode!r}")
    q = cx.pointwise("div", [a, b], t.shape, t.dtype)
    return cx.emit("floor" if rounding_mode == "floor" else "trunc", [q], t.shape, t.dtype)


@register("aten.floor_divide.default", "aten.floor_divide.Scalar")
def lower_floor_divide(cx, node, a, b):
    return lower_div(cx, node, a, b, rounding_mode="floor")


@register("aten.pow.Tensor_Scalar", "aten.pow.Tensor_Tensor", "aten.pow.Scalar")
def lower_pow(cx, node, a, b):
    t = cx.result(node)
    if not isinstance(b, Ref) and isinstance(a, Ref) and not isinstance(b, sympy.Expr):
        if b == 2:
            x = cx.operand(a, t.shape, t.dtype)
            return cx.emit("mul", [x, x], t.shape, t.dtype)
        if b == 1:
            return cx.emit("identity", [cx.operand(a, t.shape, t.dtype)], t.shape, t.dtype)
        if b == 0.5 and is_float(t.dtype):
            return cx.emit("sqrt", [cx.operand(a, t.shape, t.dtype)], t.shape, t.dtype)
    return cx.pointwise("pow", [a, b], t.shape, t.dtype)


def _unary(op: str, operand: str = "result"):
    """operand: "result" = cast the input to the result dtype; "bool"; "same" = leave it."""
    def lower(cx: Lowerer, node, x, *rest, **kw):
        t = cx.result(node)
        if operand == "result":
            dt = t.dtype
        elif operand == "bool":
            dt = "bool"
        else:
            dt = cx.dtype(x) if isinstance(x, Ref) else t.dtype
        return cx.emit(op, [cx.operand(x, t.shape, dt)], t.shape, t.dtype)
    lower.__name__ = f"lower_{op}"
    return lower


for _op in ("neg", "abs", "exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "rsqrt", "reciprocal",
            "sin", "cos", "tan", "tanh", "sigmoid", "relu", "silu", "erf", "floor", "ceil", "trunc", "sign",
            "atan", "asin", "acos", "sinh", "cosh", "square"):
    LOWERINGS[f"aten.{_op}.default"] = _unary(_op)
LOWERINGS["aten.round.default"] = _unary("round")
LOWERINGS["aten.logical_not.default"] = _unary("logical_not", "bool")
LOWERINGS["aten.isnan.default"] = _unary("isnan", "same")
LOWERINGS["aten.isinf.default"] = _unary("isinf", "same")


@register("aten.bitwise_not.default")
def lower_bitwise_not(cx, node, x):
    t = cx.result(node)
    return cx.emit("bitwise_not", [cx.operand(x, t.shape, t.dtype)], t.shape, t.dtype)


@register("aten.gelu.default")
def lower_gelu(cx, node, x, approximate="none"):
    t = cx.result(node)
    return cx.emit("gelu", [cx.operand(x, t.shape, t.dtype)], t.shape, t.dtype, approximate=approximate)


def _compare(op: str):
    def lower(cx: Lowerer, node, a, b):
        t = cx.result(node)
        common = cx.common_dtype(a, b)
        return cx.pointwise(op, [a, b], t.shape, t.dtype, operand_dtype=common)
    lower.__name__ = f"lower_{op}"
    return lower


for _op in ("eq", "ne", "lt", "le", "gt", "ge"):
    register(f"aten.{_op}.Tensor", f"aten.{_op}.Scalar")(_compare(_op))


def _logical(op: str):
    def lower(cx: Lowerer, node, a, b):
        t = cx.result(node)
        return cx.pointwise(op, [a, b], t.shape, t.dtype, operand_dtype="bool")
    return lower


for _op in ("logical_and", "logical_or", "logical_xor"):
    LOWERINGS[f"aten.{_op}.default"] = _logical(_op)


@register("aten.where.self", "aten.where.ScalarSelf", "aten.where.ScalarOther", "aten.where.Scalar")
def lower_where(cx, node, cond, a, b):
    t = cx.result(node)
    c = cx.operand(cond, t.shape, "bool")
    return cx.emit("where", [c, cx.operand(a, t.shape, t.dtype), cx.operand(b, t.shape, t.dtype)],
                   t.shape, t.dtype)


@register("aten.clamp.default", "aten.clamp.Tensor")
def lower_clamp(cx, node, x, min=None, max=None):
    t = cx.result(node)
    y = cx.operand(x, t.shape, t.dtype)
    if min is not None:
        y = cx.emit("maximum", [y, cx.operand(min, t.shape, t.dtype)], t.shape, t.dtype)
    if max is not None:
        y = cx.emit("minimum", [y, cx.operand(max, t.shape, t.dtype)], t.shape, t.dtype)
    if min is None and max is None:
        y = cx.emit("identity", [y], t.shape, t.dtype)
    return y


@register("aten.clamp_min.default", "aten.clamp_min.Tensor")
def lower_clamp_min(cx, node, x, m):
    return lower_clamp(cx, node, x, min=m)


@register("aten.clamp_max.default", "aten.clamp_max.Tensor")
def lower_clamp_max(cx, node, x, m):
    return lower_clamp(cx, node, x, max=m)


@register("aten.hardtanh.default")
def lower_hardtanh(cx, node, x, min_val=-1.0, max_val=1.0):
    return lower_clamp(cx, node, x, min=min_val, max=max_val)


# ------------------------------------------------------------ casts, copies, aliases


@register("aten._to_copy.default", "prims.convert_element_type.default", "aten.clone.default",
          "aten.to.dtype", "aten.type_as.default", "aten.contiguous.default")
def lower_copy(cx, node, x, *args, **kwargs):
    t = cx.result(node)
    if tuple(cx.shape(x)) != tuple(t.shape):
        raise NoLowering("copy changes the shape")
    if cx.dtype(x) == t.dtype:
        return cx.emit("identity", [x], t.shape, t.dtype)
    return cx.emit("cast", [x], t.shape, t.dtype)


@register("aten.alias.default", "aten.detach.default", "aten.lift_fresh_copy.default",
          "aten.lift_fresh.default", "aten.view_as.default")
def lower_alias(cx, node, x, *args, **kwargs):
    t = cx.result(node)
    if tuple(cx.shape(x)) != tuple(t.shape) or cx.dtype(x) != t.dtype:
        return cx.reshape(cx.cast(x, t.dtype), t.shape)
    return x


@register("aten._assert_tensor_metadata.default")
def lower_assert_tensor_metadata(cx, node, x, size=None, stride=None, dtype=None, **kwargs):
    """torch.export's check before `Tensor.to` that the tensor has the dtype it was traced with.
    A graph's types are static, so the check is settled here and lowers to nothing."""
    if dtype is not None and cx.dtype(x) != ir_dtype(dtype):
        raise CaptureError(f"{cx.where(node)}: the graph asserts dtype {dtype} for a {cx.dtype(x)} tensor")
    return None


# ------------------------------------------------------------ creation


def _fill(value_of):
    def lower(cx: Lowerer, node, *args, **kwargs):
        t = cx.result(node)
        return cx.full(value_of(args, kwargs), t.shape, t.dtype)
    return lower


LOWERINGS["aten.full.default"] = _fill(lambda a, k: a[1] if len(a) > 1 else k["fill_value"])
LOWERINGS["aten.full_like.default"] = _fill(lambda a, k: a[1] if len(a) > 1 else k["fill_value"])
LOWERINGS["aten.new_full.default"] = _fill(lambda a, k: a[2] if len(a) > 2 else k["fill_value"])
LOWERINGS["aten.scalar_tensor.default"] = _fill(lambda a, k: a[0])
for _n in ("aten.zeros_like.default", "aten.zeros.default", "aten.new_zeros.default",
           "aten.empty_like.default", "aten.empty.memory_format", "aten.new_empty.default",
           "aten.empty_strided.default", "aten.new_empty_strided.default"):
    LOWERINGS[_n] = _fill(lambda a, k: 0)  # empty: any value is correct; 0 is deterministic
for _n in ("aten.ones_like.default", "aten.ones.default", "aten.new_ones.default"):
    LOWERINGS[_n] = _fill(lambda a, k: 1)


@register("aten.arange.start_step", "aten.arange.default", "aten.arange.start")
def lower_arange(cx, node, *args, **kwargs):
    t = cx.result(node)
    name = op_name(node.target)
    if name == "aten.arange.default":
        start, step = 0, 1
    else:
        start = args[0]
        step = args[2] if name == "aten.arange.start_step" and len(args) > 2 else kwargs.get("step", 1)
    return cx.emit("iota", [], t.shape, t.dtype, dim=0, start=scalar_value(start, t.dtype),
                   step=scalar_value(step, t.dtype))


# ------------------------------------------------------------ views


@register("aten.view.default", "aten._unsafe_view.default", "aten.reshape.default",
          "aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.unsqueeze.default",
          "aten.flatten.using_ints", "aten.unflatten.int")
def lower_reshape(cx, node, x, *args, **kwargs):
    t = cx.result(node)
    if tuple(cx.shape(x)) == tuple(t.shape):
        return x
    return cx.emit("reshape", [x], t.shape, t.dtype)


@register("aten.permute.default")
def lower_permute(cx, node, x, dims):
    t = cx.result(node)
    rank = cx.type(x).rank
    dims = tuple(wrap_dim(d, rank) for d in dims)
    if dims == tuple(range(rank)):
        return x
    return cx.emit("permute", [x], t.shape, t.dtype, dims=dims)


@register("aten.t.default", "aten.numpy_T.default")
def lower_t(cx, node, x):
    rank = cx.type(x).rank
    if rank < 2:
        return x
    return lower_permute(cx, node, x, tuple(reversed(range(rank))))


@register("aten.transpose.int")
def lower_transpose(cx, node, x, d0, d1):
    rank = cx.type(x).rank
    if rank == 0:
        return x
    dims = list(range(rank))
    a, b = wrap_dim(d0, rank), wrap_dim(d1, rank)
    dims[a], dims[b] = dims[b], dims[a]
    return lower_permute(cx, node, x, dims)


@register("aten.expand.default", "aten.expand_as.default", "aten.broadcast_to.default")
def lower_expand(cx, node, x, *args, **kwargs):
    return cx.broadcast(x, cx.result(node).shape)


def _static_index(cx, v, what):
    if isinstance(v, sympy.Expr):
        if not v.is_Integer:
            raise NoLowering(f"symbolic {what} {v}")
        return int(v)
    return int(v)


def _index_expr(v) -> sympy.Expr:
    return v if isinstance(v, sympy.Expr) else sympy.Integer(int(v))


def _wrap_index(index: sympy.Expr, size: sympy.Expr, what: str) -> sympy.Expr:
    """A possibly negative (static) index into a dim of `size` -> a non-negative expression.

    A symbolic index is taken as non-negative (Dynamo guards what the trace assumed);
    a negative static one on a symbolic dim counts from its end (`s1 - 3`)."""
    if index.is_Integer and int(index) < 0:
        index = size + index if what == "select index" else sympy.Max(size + index, 0)
    if index.is_Integer and size.is_Integer:
        return sympy.Integer(min(max(int(index), 0), int(size)))
    if index.is_Integer:
        return sympy.Integer(max(int(index), 0))
    if not index.is_integer:
        raise NoLowering(f"{what} {index} is not an integer expression")
    return index


def _slice_bound(index, size: sympy.Expr, default: sympy.Expr) -> sympy.Expr:
    """Python's clamp of a slice start or end into [0, size] (a symbolic index is taken as
    non-negative, as `_wrap_index` takes it)."""
    if index is None:
        return default
    index = _index_expr(index)
    if index.is_Integer and int(index) >= sys.maxsize:
        return size
    if index.is_Integer and int(index) < 0:
        return sympy.Max(size + index, 0)
    return sympy.Min(index, size)


def define_slice_length(cx, node, dim: int, step: int) -> None:
    """Define the unbacked length and storage offset torch's fake slice may give its output
    (torch 2.11, tracing size-obliviously, gives `x[:, -3:]` on a dynamic dim the length u0 and
    the offset u1, where torch 2.13 writes Max(...) expressions). Neither is data-dependent: the
    length is Python's slice length of the input's size, the offset the input's plus the
    clamped start times the dim's stride, so both are defined from the slice's arguments before
    its result type is read."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return

    def unbacked(value, path) -> list:
        """The symbols naming `value` (the result type's, after the shape env's replacements:
        AOTAutograd's retrace binds fresh ones its shape env maps to Dynamo's) and those the
        node binds at `path`; none when it is not unbacked."""
        if not isinstance(value, torch.SymInt) or not free_unbacked_symbols(value):
            return []
        syms = [sympy.sympify(value.node.shape_env.replace(value.node.expr))]
        return syms + [sym for sym, keys in (node.meta.get("unbacked_bindings") or {}).items()
                       if [getattr(k, "name", getattr(k, "idx", None)) for k in keys] == path]

    length_syms = unbacked(val.shape[dim], ["size", dim])
    offset_syms = unbacked(val.storage_offset(), ["storage_offset"])
    if not length_syms and not offset_syms:
        return

    def torch_side(v):  # kept over torch's symbols: a backward graph converts them too
        v = v.meta.get("val") if isinstance(v, torch.fx.Node) else v
        return sympy.sympify(v.node.expr) if isinstance(v, torch.SymInt) else sympy.sympify(v)

    args = node.args  # aten.slice.Tensor(self, dim=0, start=None, end=None, step=1)
    start = node.kwargs.get("start", args[2] if len(args) > 2 else None)
    end = node.kwargs.get("end", args[3] if len(args) > 3 else None)
    source = node.args[0].meta["val"]
    whole = torch_side(source.shape[dim])
    first = _slice_bound(torch_side(start) if start is not None else None, whole, sympy.Integer(0))
    length = sympy.Max(_slice_bound(torch_side(end) if end is not None else None, whole, whole) - first, 0)
    length = length if step == 1 else FloorDiv(length + step - 1, step)
    offset = torch_side(source.storage_offset()) + first * torch_side(source.stride()[dim])
    shape_env = (val.shape[dim] if length_syms else val.storage_offset()).node.shape_env
    for syms, definition in ((length_syms, length), (offset_syms, offset)):
        for sym in syms:
            if sym.is_Symbol:
                cx.symbols.define(sym, definition, shape_env)


@register("aten.slice.Tensor")
def lower_slice(cx, node, x, dim=0, start=None, end=None, step=1):
    shape = cx.shape(x)
    dim = wrap_dim(dim, len(shape))
    size = shape[dim]
    step = _static_index(cx, step, "slice step")
    define_slice_length(cx, node, dim, step)
    t = cx.result(node)
    start = _wrap_index(sympy.Integer(0) if start is None else _index_expr(start), size, "slice start")
    if tuple(t.shape) == tuple(shape) and start == 0:
        return x
    return cx.emit("slice", [x], t.shape, t.dtype, dim=dim, start=size_attr(start), step=step)


@register("aten.select.int")
def lower_select(cx, node, x, dim, index):
    t = cx.result(node)
    shape = cx.shape(x)
    dim = wrap_dim(dim, len(shape))
    index = _wrap_index(_index_expr(index), shape[dim], "select index")
    return cx.emit("select", [x], t.shape, t.dtype, dim=dim, index=size_attr(index))


@register("aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int")
def lower_split(cx, node, x, arg=None, dim=0):
    vals = node.meta["val"]
    shape = cx.shape(x)
    name = op_name(node.target)
    if name == "aten.unbind.int":
        dim = wrap_dim(arg if arg is not None else 0, len(shape))
        return tuple(cx.emit("select", [x], cx.tensor_type(v).shape, cx.dtype(x), dim=dim, index=i)
                     for i, v in enumerate(vals))
    dim = wrap_dim(dim, len(shape))
    out, start = [], sympy.Integer(0)
    for v in vals:
        vt = cx.tensor_type(v)
        if tuple(vt.shape) == tuple(shape):
            out.append(x)
        else:
            out.append(cx.emit("slice", [x], vt.shape, vt.dtype, dim=dim, start=size_attr(start), step=1))
        start = start + vt.shape[dim]
    return tuple(out)


# ------------------------------------------------------------ reductions


def reduce(cx: Lowerer, op: str, x: Ref, dims, keepdim: bool, dtype: str | None = None) -> Ref:
    """One IR reduction over normalized dims (input cast to the output dtype for sum/prod/max/min)."""
    shape = cx.shape(x)
    dims = cx.dims(dims, len(shape))
    if op in ("sum", "prod", "max", "min"):
        x = cx.cast(x, dtype or cx.dtype(x))
        out_dtype = cx.dtype(x)
    elif op == "any":
        x = cx.cast(x, "bool")
        out_dtype = "bool"
    else:
        out_dtype = "int64"
    if len(shape) == 0:  # a 0-dim tensor: reducing it is the identity
        return cx.emit("identity", [x], (), out_dtype) if op not in ("argmax", "argmin") \
            else cx.full(0, (), "int64")
    out_shape = tuple(sympy.Integer(1) if i in dims else s for i, s in enumerate(shape)) if keepdim \
        else tuple(s for i, s in enumerate(shape) if i not in dims)
    return cx.emit(op, [x], out_shape, out_dtype, dims=dims, keepdim=bool(keepdim))


def expand_back(cx, r: Ref, full_shape, dims, keepdim: bool) -> Ref:
    """A reduced value broadcast back to the full (unreduced) shape."""
    if not keepdim:
        kd = tuple(sympy.Integer(1) if i in dims else s for i, s in enumerate(full_shape))
        r = cx.reshape(r, kd)
    return cx.broadcast(r, full_shape)


def count(cx, shape, dims):
    return numel([shape[d] for d in dims if d < len(shape)])  # a 0-dim tensor reduces over one element


def _scalar_int(v):
    """A correction (int, float or size expression) as a sympy number/expression."""
    if isinstance(v, sympy.Expr):
        return v
    if isinstance(v, float) and v.is_integer():
        return sympy.Integer(int(v))
    return sympy.sympify(v)


@register("aten.sum.dim_IntList", "aten.sum.default")
def lower_sum(cx, node, x, dim=None, keepdim=False, *, dtype=None):
    t = cx.result(node)
    return reduce(cx, "sum", x, dim, keepdim, t.dtype)


@register("aten.prod.dim_int", "aten.prod.default")
def lower_prod(cx, node, x, dim=None, keepdim=False, *, dtype=None):
    t = cx.result(node)
    return reduce(cx, "prod", x, dim, keepdim, t.dtype)


@register("aten.amax.default", "aten.max.default")
def lower_amax(cx, node, x, dim=None, keepdim=False):
    return reduce(cx, "max", x, dim, keepdim)


@register("aten.amin.default", "aten.min.default")
def lower_amin(cx, node, x, dim=None, keepdim=False):
    return reduce(cx, "min", x, dim, keepdim)


@register("aten.max.dim")
def lower_max_dim(cx, node, x, dim, keepdim=False):
    return reduce(cx, "max", x, [dim], keepdim), reduce(cx, "argmax", x, [dim], keepdim)


@register("aten.min.dim")
def lower_min_dim(cx, node, x, dim, keepdim=False):
    return reduce(cx, "min", x, [dim], keepdim), reduce(cx, "argmin", x, [dim], keepdim)


def _arg(op: str):
    def lower(cx: Lowerer, node, x, dim=None, keepdim=False):
        t = cx.result(node)
        if dim is None:
            flat = cx.reshape(x, (numel(cx.shape(x)),))
            r = reduce(cx, op, flat, [0], False)
            return cx.reshape(r, t.shape)
        return reduce(cx, op, x, [dim], keepdim)
    return lower


LOWERINGS["aten.argmax.default"] = _arg("argmax")
LOWERINGS["aten.argmin.default"] = _arg("argmin")


@register("aten.any.dim", "aten.any.dims", "aten.any.default")
def lower_any(cx, node, x, dim=None, keepdim=False):
    return reduce(cx, "any", x, dim, keepdim)


@register("aten.all.dim", "aten.all.dims", "aten.all.default")
def lower_all(cx, node, x, dim=None, keepdim=False):
    # all(x) = not any(not x)
    t = cx.result(node)
    nx = cx.emit("logical_not", [cx.cast(x, "bool")], cx.shape(x), "bool")
    r = reduce(cx, "any", nx, dim, keepdim)
    return cx.emit("logical_not", [r], t.shape, "bool")


@register("aten.mean.dim", "aten.mean.default")
def lower_mean(cx, node, x, dim=None, keepdim=False, *, dtype=None):
    t = cx.result(node)
    shape = cx.shape(x)
    dims = cx.dims(dim, len(shape))
    acc = acc_dtype(t.dtype)
    n = count(cx, shape, dims)  # a size expression when a reduced dim is symbolic: a Size `full`
    s = reduce(cx, "sum", x, dims, keepdim, acc)
    m = cx.pointwise("div", [s, n], cx.shape(s), acc)
    return cx.cast(m, t.dtype)


def _variance(cx, x, dims, correction, keepdim, with_centered=False):
    """(var, mean) in the accumulation dtype; mean kept with keepdim (+ x - mean if asked)."""
    shape = cx.shape(x)
    dims = cx.dims(dims, len(shape))
    acc = acc_dtype(cx.dtype(x))
    xa = cx.cast(x, acc)
    n = count(cx, shape, dims)  # a size expression when a reduced dim is symbolic: a Size `full`
    s = reduce(cx, "sum", xa, dims, True, acc)
    mean = cx.pointwise("div", [s, n], cx.shape(s), acc)
    d = cx.emit("sub", [xa, cx.broadcast(mean, shape)], shape, acc)
    sq = cx.emit("mul", [d, d], shape, acc)
    ss = reduce(cx, "sum", sq, dims, keepdim, acc)
    corr = 1 if correction is None else correction
    var = cx.pointwise("div", [ss, sympy.Max(n - _scalar_int(corr), 0)], cx.shape(ss), acc)
    if not keepdim:
        mean = cx.reshape(mean, cx.shape(var))
    return (var, mean, d) if with_centered else (var, mean)


@register("aten.var.correction")
def lower_var(cx, node, x, dim=None, *, correction=None, keepdim=False):
    t = cx.result(node)
    var, _ = _variance(cx, x, dim, correction, keepdim)
    return cx.cast(var, t.dtype)


@register("aten.var_mean.correction")
def lower_var_mean(cx, node, x, dim=None, *, correction=None, keepdim=False):
    tv, tm = cx.result(node, 0), cx.result(node, 1)
    var, mean = _variance(cx, x, dim, correction, keepdim)
    return cx.cast(var, tv.dtype), cx.cast(mean, tm.dtype)


def _softmax_parts(cx, x, dim, half_to_float):
    t = cx.result()
    shape = cx.shape(x)
    dim = wrap_dim(dim, len(shape))
    acc = acc_dtype(t.dtype)
    xa = cx.cast(x, acc)
    m = reduce(cx, "max", xa, [dim], True)
    shifted = cx.emit("sub", [xa, cx.broadcast(m, shape)], shape, acc)
    e = cx.emit("exp", [shifted], shape, acc)
    s = reduce(cx, "sum", e, [dim], True)
    return t, shape, acc, shifted, e, s


@register("aten._softmax.default")
def lower_softmax(cx, node, x, dim, half_to_float=False):
    t, shape, acc, _, e, s = _softmax_parts(cx, x, dim, half_to_float)
    out = cx.emit("div", [e, cx.broadcast(s, shape)], shape, acc)
    return cx.cast(out, t.dtype)


@register("aten._log_softmax.default")
def lower_log_softmax(cx, node, x, dim, half_to_float=False):
    t, shape, acc, shifted, _, s = _softmax_parts(cx, x, dim, half_to_float)
    ls = cx.emit("log", [s], cx.shape(s), acc)
    out = cx.emit("sub", [shifted, cx.broadcast(ls, shape)], shape, acc)
    return cx.cast(out, t.dtype)


@register("aten.native_layer_norm.default")
def lower_native_layer_norm(cx, node, x, normalized_shape, weight, bias, eps):
    t_out, t_mean, t_rstd = cx.result(node, 0), cx.result(node, 1), cx.result(node, 2)
    shape = cx.shape(x)
    k = len(normalized_shape)
    dims = tuple(range(len(shape) - k, len(shape)))
    acc = acc_dtype(t_out.dtype)
    var, mean, d = _variance(cx, x, dims, 0, True, with_centered=True)
    ve = cx.pointwise("add", [var, float(eps)], cx.shape(var), acc)
    rstd = cx.emit("rsqrt", [ve], cx.shape(var), acc)
    y = cx.emit("mul", [d, cx.broadcast(rstd, shape)], shape, acc)
    if weight is not None:
        y = cx.emit("mul", [y, cx.operand(weight, shape, acc)], shape, acc)
    if bias is not None:
        y = cx.emit("add", [y, cx.operand(bias, shape, acc)], shape, acc)
    out = cx.cast(y, t_out.dtype)
    return out, cx.reshape(cx.cast(mean, t_mean.dtype), t_mean.shape), \
        cx.reshape(cx.cast(rstd, t_rstd.dtype), t_rstd.shape)


# ------------------------------------------------------------ matmul


def _same_dtype(cx, a, b):
    if cx.dtype(a) != cx.dtype(b):
        raise NoLowering(f"matmul operands of different dtypes ({cx.dtype(a)}, {cx.dtype(b)})")


@register("aten.mm.default")
def lower_mm(cx, node, a, b):
    t = cx.result(node)
    _same_dtype(cx, a, b)
    return cx.emit("mm", [a, b], t.shape, t.dtype)


@register("aten.bmm.default")
def lower_bmm(cx, node, a, b):
    t = cx.result(node)
    _same_dtype(cx, a, b)
    return cx.emit("bmm", [a, b], t.shape, t.dtype)


def _plus_bias(cx, op, node, bias, a, b, beta, alpha):
    t = cx.result(node)
    _same_dtype(cx, a, b)
    p = cx.emit(op, [a, b], t.shape, t.dtype)
    if alpha != 1:
        p = cx.pointwise("mul", [p, alpha], t.shape, t.dtype)
    if beta == 0:
        return p
    c = cx.operand(bias, t.shape, t.dtype)
    if beta != 1:
        c = cx.emit("mul", [c, cx.full(beta, t.shape, t.dtype)], t.shape, t.dtype)
    return cx.emit("add", [p, c], t.shape, t.dtype)


@register("aten.addmm.default")
def lower_addmm(cx, node, bias, a, b, *, beta=1, alpha=1):
    return _plus_bias(cx, "mm", node, bias, a, b, beta, alpha)


@register("aten.baddbmm.default")
def lower_baddbmm(cx, node, bias, a, b, *, beta=1, alpha=1):
    return _plus_bias(cx, "bmm", node, bias, a, b, beta, alpha)


@register("aten.repeat.default")
def lower_repeat(cx, node, x, repeats):
    """repeat = reshape (interleave size-1 dims) + expand + reshape: views only."""
    t = cx.result(node)
    reps = [cx.symbols.size(r) if not isinstance(r, sympy.Expr) else r for r in repeats]
    src = list(cx.shape(x))
    src = [sympy.Integer(1)] * (len(reps) - len(src)) + src
    inter = []
    wide = []
    for r, s in zip(reps, src):
        inter += [sympy.Integer(1), s]
        wide += [r, s]
    y = cx.reshape(x, inter)
    y = cx.broadcast(y, wide)
    return cx.reshape(y, t.shape)


# Op families kept in modules of their own register their rows into LOWERINGS on import.
from . import lower_functional, lower_indexing, lower_math, lower_pool, lower_random, lower_scan, lower_scatter  # noqa: E402,F401

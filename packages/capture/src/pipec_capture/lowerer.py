"""Lower an ATen-level torch.fx GraphModule into a `pipec_ir.Graph`: the driver.

`Lowerer` walks the fx graph: placeholders become graph inputs, get_attr constants `full`
literals or buffer inputs, and every call a row of the lowering table (table.py) or, where
none applies, an `extern` node. The rows live in the family modules imported below.
"""

from __future__ import annotations

import operator

from typing import Any

import sympy
import torch
import torch.fx

import pipec_ir
from pipec_ir import Graph, GraphInput, Node, Ref, TensorType
from pipec_ir.ops import COLLECTIVE_OPS, VIEW_OPS

# Each family module adds its rows to table.LOWERINGS on import.
from . import (  # noqa: F401
    lower_collectives, lower_functional, lower_indexing, lower_math, lower_matmul, lower_pointwise, lower_pool,
    lower_pool_adaptive_backward, lower_pool_backward, lower_random, lower_reduction, lower_scan, lower_scatter,
    lower_views,
)
from .builder import scalar_value
from .dtypes import ir_dtype
from .errors import CaptureError
from .extern_calls import EFFECT_TOKENS, WITH_EFFECTS, ExternCalls, MultiExtern
from .fx_edit import draws_random
from .lower_random import FALLBACK_RANDOM, is_philox_seed
from .table import LOWERINGS, NoLowering, extern_reason, op_name
from .attention_layouts import follow_attention_layouts
from .portable_attention import LIBRARY_COPY
from .complex_pairs import complex_as_pairs
from .conv_bias import split_conv_bias
from .fold_gelu import fold_tanh_gelu
from .conv_layouts import convs_channels_last, drop_needless_copies, output_strides, restore_output_strides
from .follow_layouts import follow_layouts
from .sink_gathers import sink_gathers


def opaque_object_name(val: Any) -> str | None:
    """The class name of a script object or opaque object (`torch._library.opaque_object`)
    graph input, as AOTAutograd's fake tracing sees it (a FakeScriptObject) or as it runs;
    None for anything else."""
    from torch._library.fake_class_registry import FakeScriptObject

    if isinstance(val, FakeScriptObject):
        return val.script_class_name.rsplit(".", 1)[-1]
    if isinstance(val, torch.ScriptObject):
        return "ScriptObject"
    from torch._library import opaque_object

    is_opaque = getattr(opaque_object, "is_opaque_value", None)
    return type(val).__name__ if is_opaque is not None and is_opaque(val) else None


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



class Lowerer(ExternCalls):
    """Lowers one fx graph (`run`), a node at a time, into the builder's IR."""

    def __init__(self, gm: torch.fx.GraphModule, *, name: str = "graph",
                 input_specs: dict[str, tuple[str, str]] | None = None,
                 fullgraph: bool = False, model_name: str | None = None, fallback_random: bool = False) -> None:
        super().__init__(model_name=model_name or name, reserved={n.name for n in gm.graph.nodes})
        self.gm = gm
        self.name = name
        self.input_specs = input_specs or {}
        self.fullgraph = fullgraph
        self.fallback_random = fallback_random  # random ops as calls to torch (lower_random.FALLBACK_RANDOM)
        self.inputs: list[GraphInput] = []
        self.env: dict[torch.fx.Node, Any] = {}
        self.writes: dict[str, str] = {}  # graph input -> the value it holds after a run (copy_ into it)

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
        self.nodes = eliminate_dead_nodes(self.nodes, (*outputs, *self.writes.values()))
        graph = Graph(name=self.name, inputs=tuple(self.inputs), nodes=tuple(self.nodes),
                      outputs=outputs, symbols=self.symbols.ranges, writes=tuple(self.writes.items()))
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
        elif opaque_object_name(val) is not None:
            self.opaque_input(node, opaque_object_name(val))
        elif isinstance(val, torch.SymBool) and self.symbols.mentions_defined(val):
            # torch 2.11's backward takes the forward's checks of a defined size (`u0 >= 0`) for
            # its asserts, which hold by the definition: no input (checks_a_defined_size)
            self.env[node] = None
        else:
            raise CaptureError(f"{self.where(node)}: input of type {type(val).__name__} is not supported")

    def opaque_input(self, node: torch.fx.Node, what: str) -> None:
        """An object input (a script or opaque object: DTensor's DeviceMesh under tensor
        parallel) that the graph only hands on to its outputs (AOTAutograd saves the mesh for
        the backward graph, and a backward returns it where the forward's DTensor inputs had
        it). It is no graph input: the graph's output there is None, which the caller fills
        with the object it passed (pipec.backend.with_object_outputs). A graph whose ops read
        the object is not supported; its collectives name their group by string."""
        readers = [u for u in node.users if u.op != "output"]
        if readers:
            raise CaptureError(
                f"{self.where(readers[0])}: reads input {node.name}, a {what} object; pipec passes "
                "script and opaque objects (a DTensor's DeviceMesh) only through to the outputs")
        self.env[node] = None

    def get_attr(self, node: torch.fx.Node) -> None:
        """A tensor constant of the fx graph: a one-element constant becomes a `full` literal;
        a larger one becomes a trailing graph input (role "buffer", named by its attribute
        path) whose value `constant_bindings(gm, graph)` returns."""
        try:
            value = _fetch_attr(self.gm, node.target)
        except AttributeError:
            raise CaptureError(f"{self.where(node)}: graph attribute {node.target!r} does not exist") from None
        if isinstance(value, torch.fx.GraphModule):
            self.env[node] = None  # a higher-order op's body: the op itself is refused by name (extern)
            return
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
        if target == "aten.copy_.default" and self.writes_an_input(node):
            return
        if node.meta.get(LIBRARY_COPY):  # a copy of attention's output only where it is needed
            self.env[node] = self.extern(node, "aten.contiguous.default", "library")
            return
        if self.fallback_random and draws_random(node):
            self.env[node] = self.extern(node, target, FALLBACK_RANDOM)
            return
        if target in EFFECT_TOKENS:  # made and consumed inside the graph (aot.effect_tokens_inside)
            self.env[node] = None
            return
        if WITH_EFFECTS is not None and node.target is WITH_EFFECTS:
            self.env[node] = self.effectful_call(node)
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
                self.__dict__.pop("_produced", None)  # the name map of `produced` may hold them
                reason = f"no lowering for {target}: {why}"
        else:
            reason = extern_reason(target)
        self.env[node] = self.extern(node, target, reason)

    def writes_an_input(self, node: torch.fx.Node) -> bool:
        """`input.copy_(value)`: an input mutation AOTAutograd kept in an inference graph
        (`keep_inference_input_mutations`: an optimizer step's parameters and state, a static KV
        cache). The graph records the write (`Graph.writes`); the value is a computed node of the
        input's type (a cast, broadcast or fresh copy of the source), never an input or a view,
        so a kernel can store it into the input's memory. Readers of the copy_'s result read it."""
        dst = node.args[0]
        ref = self.env.get(dst) if isinstance(dst, torch.fx.Node) and dst.op == "placeholder" else None
        if not isinstance(ref, Ref) or not isinstance(self.map_arg(node.args[1]), Ref):
            return False
        t = self.types[ref.name]
        value = self.broadcast(self.cast(self.map_arg(node.args[1]), t.dtype), t.shape)
        producer = self.produced(value.name)
        if producer is None or producer.op in VIEW_OPS or value.name in self.writes.values():
            value = self.emit("identity", [value], t.shape, t.dtype)
        self.writes[ref.name] = value.name
        self.env[node] = value
        return True

    def produced(self, name: str) -> Node | None:
        """The node named `name` (None for an input), from a map extended as nodes are emitted."""
        known = self.__dict__.setdefault("_produced", {})
        for n in self.nodes[len(known):]:
            known[n.name] = n
        return known.get(name)

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

    # Python arithmetic giving a float from sizes: BatchNorm's n / (n - 1) (the unbiased running
    # variance's correction) when n is symbolic. It becomes a 0-d float64 value the program
    # computes from its size expressions, which the ops reading it take as a scalar operand.
    FLOAT_SCALAR_OPS = {operator.truediv: "div", operator.mul: "mul", operator.add: "add", operator.sub: "sub"}

    def scalar_node(self, node, val):
        if isinstance(val, (torch.SymInt, int)) and not isinstance(val, bool):
            return self.symbols.size(val)
        if isinstance(val, (float, bool)):
            return val
        if isinstance(val, torch.SymFloat) and _feeds_only_sizes(node):
            # float arithmetic on sizes that ends in a size (DiT's unpatchify, `int(seq ** 0.5)`):
            # the size is read off its own traced expression (SymbolTable.size), not these steps
            return None
        op = self.FLOAT_SCALAR_OPS.get(node.target)
        if isinstance(val, torch.SymFloat) and op is not None and len(node.args) == 2 and not node.kwargs:
            return self.pointwise(op, [self.map_arg(a) for a in node.args], (), "float64")
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
            return self.result_of(value, index, self.own_name(node))
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
    random ops when no live `rand` reads it (a dead randn in a backward graph). Collectives are
    always kept: every rank of the group must take part, whether or not this one reads the result.
    """
    live = {o for o in outputs if o is not None}
    kept = []
    for n in reversed(nodes):
        if n.name in live or (n.op == "extern" and not is_philox_seed(n)) or n.op in COLLECTIVE_OPS:
            live.update(n.inputs)
            kept.append(n)
    return kept[::-1]



def lower_graph(gm: torch.fx.GraphModule, example_inputs=None, *, name: str = "graph",
                input_specs: dict[str, tuple[str, str]] | None = None, fullgraph: bool = False,
                model_name: str | None = None, fallback_random: bool = False,
                conv_channels_last: bool = True) -> Graph:
    """Lower an ATen fx GraphModule to a verified pipec Graph.

    input_specs: placeholder name -> (IR input name, role) for parameters/buffers.
    conv_channels_last: 16-bit CUDA convs read NHWC operands (conv_layouts.py; option
    `conv_channels_last`, default on).
    If some node lacks meta["val"], it is filled by fake-tensor propagation of example_inputs.
    """
    ensure_meta(gm, example_inputs)
    complex_as_pairs(gm)
    fold_tanh_gelu(gm)
    sink_gathers(gm)
    split_conv_bias(gm)
    traced_strides = output_strides(gm)
    if conv_channels_last:
        convs_channels_last(gm)
    follow_layouts(gm)
    drop_needless_copies(gm)  # the copies to NHWC of what follow_layouts stored NHWC since
    restore_output_strides(gm, traced_strides)
    follow_attention_layouts(gm)
    return Lowerer(gm, name=name, input_specs=input_specs, fullgraph=fullgraph, model_name=model_name,
                   fallback_random=fallback_random).run()


def _feeds_only_sizes(node: torch.fx.Node) -> bool:
    """Whether every reader of `node` (a SymFloat) makes a size, directly or through more float
    arithmetic: nothing then needs the float's value at run time."""
    for user in node.users:
        val = user.meta.get("val")
        if isinstance(val, torch.SymFloat) and _feeds_only_sizes(user):
            continue
        if not isinstance(val, torch.SymInt):
            return False
    return bool(node.users)


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

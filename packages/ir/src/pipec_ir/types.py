"""The three IR documents — Graph, KernelPlan, Program — as frozen dataclasses.

Every field is hashable and free of torch objects. Shapes are tuples of sympy
expressions. Op attributes are `(key, value)` pairs whose values are JSON-like
scalars, tuples, or one of the tagged leaves below (`Ref`, `Dtype`, `Device`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union

import sympy

from .symbolic import numel

DTYPES = (
    "float64", "float32", "float16", "bfloat16",
    "int64", "int32", "int16", "int8", "uint8", "bool",
)
FLOAT_DTYPES = ("float64", "float32", "float16", "bfloat16")
ITEMSIZE = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8,
            "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "bool": 1}


@dataclass(frozen=True)
class Ref:
    """A tensor argument of an extern call, by value name."""
    name: str


def ref_names(value):
    """The names of the `Ref`s inside an extern call's argument (tuples nest)."""
    if isinstance(value, Ref):
        yield value.name
    elif isinstance(value, tuple):
        for v in value:
            yield from ref_names(v)


def renamed_refs(value, renamed: dict[str, str]):
    """`value` (an extern call's argument or attributes; tuples nest) with each `Ref` whose name
    `renamed` holds pointing at the new name."""
    if isinstance(value, Ref):
        return Ref(renamed.get(value.name, value.name))
    if isinstance(value, tuple):
        return tuple(renamed_refs(v, renamed) for v in value)
    return value


@dataclass(frozen=True)
class Dtype:
    """A torch dtype argument, by name ("float32")."""
    name: str


@dataclass(frozen=True)
class Device:
    """The device argument of an extern call: whatever device the run happens on."""


@dataclass(frozen=True)
class Size:
    """A symbolic integer attribute: a size expression of the graph's symbols ("s1 - 3"),
    evaluated at run time with the symbols' values (static sizes stay plain ints)."""
    expr: str

    @property
    def value(self) -> sympy.Expr:
        from .symbolic import parse_expr

        return parse_expr(self.expr)


def size_attr(value):
    """An integer size for an attribute: a plain int when static, else a `Size`."""
    from .symbolic import as_expr, expr_str

    expr = as_expr(value)
    return int(expr) if expr.is_Integer else Size(expr_str(expr))


def attr_expr(value) -> sympy.Expr:
    """An integer attribute (int or `Size`) as a sympy expression."""
    if isinstance(value, Size):
        return value.value
    if isinstance(value, bool):
        return sympy.Integer(int(value))
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, sympy.Expr):
        return value
    raise TypeError(f"not an integer attribute: {value!r}")


AttrValue = Union[None, bool, int, float, str, Ref, Dtype, Device, Size, tuple]
Attrs = tuple  # tuple[tuple[str, AttrValue], ...]


def get_attr(attrs: Attrs, key: str, default=None):
    for k, v in attrs:
        if k == key:
            return v
    return default


def make_attrs(**kwargs) -> Attrs:
    return tuple(sorted((k, _freeze(v)) for k, v in kwargs.items()))


def _freeze(value):
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    return value


@dataclass(frozen=True)
class TensorType:
    shape: tuple[sympy.Expr, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> sympy.Expr:
        return numel(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class SymbolRange:
    """A size symbol with its value range (upper None = unbounded) and an example value."""
    name: str
    lower: int
    upper: int | None
    hint: int


# ---------------------------------------------------------------- Graph


@dataclass(frozen=True)
class GraphInput:
    name: str
    type: TensorType
    role: str = "input"  # "input" | "parameter" | "buffer"


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]
    type: TensorType
    attrs: Attrs = ()

    def attr(self, key: str, default=None):
        return get_attr(self.attrs, key, default)


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple[GraphInput, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str | None, ...]
    symbols: tuple[SymbolRange, ...] = ()
    # (input, value) pairs (1.7): after a run, graph input `input` holds `value` (a node of the
    # input's exact type), an in-place update kept in the graph (an optimizer step's parameters)
    writes: tuple[tuple[str, str], ...] = ()

    def results(self) -> tuple[str, ...]:
        """The values a run must leave behind: the outputs (not None), then the written values."""
        return tuple(o for o in self.outputs if o is not None) + tuple(v for _, v in self.writes)

    def types(self) -> dict[str, TensorType]:
        """Value name -> type (a new dict each call; built once per graph: codegen asks ~500
        times for a BERT graph)."""
        cached = self.__dict__.get("_types")
        if cached is None:
            cached = {i.name: i.type for i in self.inputs}
            cached.update((n.name, n.type) for n in self.nodes)
            object.__setattr__(self, "_types", cached)  # the graph is immutable: the map never changes
        return dict(cached)

    def node_map(self) -> dict[str, Node]:
        """Node name -> node (a new dict each call; built once per graph, as `types`)."""
        cached = self.__dict__.get("_node_map")
        if cached is None:
            cached = {n.name: n for n in self.nodes}
            object.__setattr__(self, "_node_map", cached)
        return dict(cached)

    def users(self) -> dict[str, list[str]]:
        """Value name -> names of nodes that read it (in graph order)."""
        out: dict[str, list[str]] = {i.name: [] for i in self.inputs}
        for n in self.nodes:
            out.setdefault(n.name, [])
            for i in n.inputs:
                out.setdefault(i, []).append(n.name)
        return out


# ---------------------------------------------------------------- KernelPlan


@dataclass(frozen=True)
class Kernel:
    """One group of graph nodes that becomes one launch (or one extern call)."""
    name: str
    kind: str  # "pointwise" | "reduction" | "matmul" | "extern" | "view"
    nodes: tuple[str, ...]  # topological order; views used inside are listed too
    outputs: tuple[str, ...]  # nodes whose values are stored to memory
    inputs: tuple[str, ...]  # values read from memory
    domain: tuple[sympy.Expr, ...] = ()  # iteration shape (reduction: the reduced input's shape)
    reduce_dims: tuple[int, ...] = ()


@dataclass(frozen=True)
class FusionDecision:
    kernel: str  # the kernel the merge ended up in
    first: tuple[str, ...]  # nodes of the two groups merged
    second: tuple[str, ...]
    kind: str  # "vertical" | "horizontal"
    score: float


@dataclass(frozen=True)
class RejectedFusion:
    first: str  # a node of each group
    second: str
    reason: str


@dataclass(frozen=True)
class KernelPlan:
    graph: Graph
    policy: str
    kernels: tuple[Kernel, ...]
    fusions: tuple[FusionDecision, ...] = ()
    rejected: tuple[RejectedFusion, ...] = ()


# ---------------------------------------------------------------- Program


@dataclass(frozen=True)
class Buffer:
    name: str
    type: TensorType
    slot: int | None = None  # memory-plan slot for kernel-written intermediates


@dataclass(frozen=True)
class Slot:
    index: int
    nbytes: sympy.Expr


# A LaunchConfig constant that, when nonzero, says the config reads its pointers through TMA
# descriptors and needs every pointer 16-byte aligned: a runtime launches configs[0] instead for a
# call whose pointers are not (docs/IR.md, "Launch configs").
TMA_CONSTANT = "TMA"
# A LaunchConfig constant that, when nonzero, is the register cap per thread the kernel is compiled
# with (Triton's `maxnreg` option): a warp-specialized Gluon kernel's partitions share the register
# file through `setmaxnreg`, which needs that cap (1.4; docs/IR.md, "Launch configs").
MAXNREG_CONSTANT = "MAXNREG"


@dataclass(frozen=True)
class LaunchConfig:
    """One autotuning candidate: constexpr block sizes plus warps/stages."""
    constants: tuple[tuple[str, int], ...]
    num_warps: int = 4
    num_stages: int = 1


@dataclass(frozen=True)
class TritonKernel:
    name: str
    source: str  # a Python module defining `name` as a @triton.jit (or @gluon.jit, 1.4) function
    args: tuple[str, ...]  # pointer parameters, in order (buffer names are bound per Step)
    sizes: tuple[tuple[str, sympy.Expr], ...]  # integer parameters after the pointers
    grid: tuple[tuple[sympy.Expr, str], ...]  # per grid axis: cdiv(expr, config[constant])
    configs: tuple[LaunchConfig, ...]


@dataclass(frozen=True)
class Step:
    kind: str  # "launch" | "extern"
    target: str  # kernel name, or ATen overload ("aten.mm.default")
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Attrs = ()  # extern: ("args", ...), ("kwargs", ...) with Ref leaves


@dataclass(frozen=True)
class Program:
    name: str
    inputs: tuple[Buffer, ...]
    outputs: tuple[str | None, ...]
    buffers: tuple[Buffer, ...]
    kernels: tuple[TritonKernel, ...]
    steps: tuple[Step, ...]
    slots: tuple[Slot, ...] = ()
    symbols: tuple[SymbolRange, ...] = ()
    peak_bytes: sympy.Expr = field(default_factory=lambda: sympy.Integer(0))
    # Size symbols along which every input may be zero-padded (each dim to its size at a
    # larger value of the symbol) and each output sliced back, with the same result: no
    # output element reads a padded element (codegen proves it; docs/IR.md, "Padding").
    pad_symbols: tuple[str, ...] = ()
    # (input, buffer) pairs (1.7), the graph's `writes`: after a run, input `input` holds the
    # buffer's values. A launch may have written them there already (`inplace` naming the input);
    # the runtime copies the rest (docs/IR.md, "Writes to inputs").
    writes: tuple[tuple[str, str], ...] = ()

    def kernel_map(self) -> dict[str, TritonKernel]:
        return {k.name: k for k in self.kernels}


DOCUMENT_KINDS = {"graph": Graph, "kernel_plan": KernelPlan, "program": Program}
KIND_OF = {v: k for k, v in DOCUMENT_KINDS.items()}

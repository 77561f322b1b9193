"""Triton source for a `scatter` kernel (docs/IR.md): an init launch, then the scatter.

`scatter(self, index, src; reduce)` is self with src written or accumulated at self's flat
positions `index`. Two launches write the scatter's output buffer, in order:

1. `<kernel>_init`, pointwise over self's shape: stores self (the kernel's init members,
   e.g. a `zeros`, are computed in place of a copy);
2. `<kernel>`, pointwise over the index's shape: evaluates the position and the value
   (the prologue members) at every point and stores them (`tl.store`, reduce "none") or
   accumulates them (`tl.atomic_add` / `tl.atomic_max` / `tl.atomic_min`). The launch
   boundary orders the two; within the scatter, atomics make duplicate positions add
   up. Positions outside self are dropped rather than written out of bounds.

Both are written by `KernelWriter`, so views, broadcasts and `take` reads inside the
kernel are ordinary index arithmetic.
"""

from __future__ import annotations

from pipec_ir import Kernel, Step, TritonKernel
from pipec_ir.symbolic import numel

from .configs import pointwise_configs, upper_bound
from .dtypes import tl_storage
from .kernel_source import CodegenError, Scope
from .writer import KernelWriter

# codegen's row per scatter reduce (pipec_ir.ops.SCATTER_REDUCES): the Triton call writing one
# value at each position
TRITON_SCATTER_WRITES = {"none": "tl.store", "sum": "tl.atomic_add", "amax": "tl.atomic_max", "amin": "tl.atomic_min"}
# dtypes Triton has these atomics for (capture accumulates narrower types in one of these)
_ATOMIC_DTYPES = ("float32", "float64", "int32", "int64")


class ScatterWriter(KernelWriter):
    """The scatter launch: one program instance per index element."""

    def __init__(self, graph, kernel: Kernel, scatter_node, bounds_check: bool = False):
        super().__init__(graph, kernel, bounds_check=bounds_check)
        self.scatter = scatter_node

    def _write_pointwise(self) -> list[str]:
        base, index, src = self.scatter.inputs
        reduce = self.scatter.attr("reduce")
        dtype = self.scatter.type.dtype
        if reduce not in TRITON_SCATTER_WRITES:
            raise CodegenError(f"{self.kernel.name}: unknown scatter reduce {reduce!r}")
        if reduce != "none" and dtype not in _ATOMIC_DTYPES:
            raise CodegenError(f"{self.kernel.name}: no Triton atomic for scatter {reduce} on {dtype}")
        self.outer, self.inner = Scope([], inner=False, indent="    "), None
        lines = self.outer.lines
        lines += ["    xoffset = tl.program_id(0) * XBLOCK",
                  "    xindex = xoffset + tl.arange(0, XBLOCK)",
                  "    xmask = xindex < xnumel"]
        self._define_indices(self.outer, self.xsyms, self.kept, "xindex")
        position, _ = self.value(index, self.domain_index)
        value, _ = self.value(src, self.domain_index)
        size = self.print_size(numel(self.types[base].shape))
        # bounds_check: a position outside self (eager raises an index error) fails the assertion
        position = self.check_bounds(self.outer, self.scatter.name, position, "xmask", "scatter")
        mask = self.emit(self.outer, f"xmask & ({position} >= 0) & ({position} < {size})")
        out = self.out_ptr[self.scatter.name]
        stored = f"{value}.to({tl_storage(dtype)})"
        if reduce == "none":
            lines.append(f"    tl.store({out} + {position}, {stored}, mask={mask})")
        else:  # relaxed: only the sum at the end of the launch is read
            lines.append(f"    {TRITON_SCATTER_WRITES[reduce]}({out} + {position}, {stored}, mask={mask}, sem=\"relaxed\")")
        return lines

    def _docstring(self) -> str:
        reduce = self.scatter.attr("reduce")
        how = "writes" if reduce == "none" else f"accumulates ({reduce})"
        shape = ", ".join(map(str, self.domain))
        target = ", ".join(map(str, self.types[self.scatter.inputs[0]].shape))
        return f"scatter: {how} [{shape}] values into [{target}] at computed positions; writes {self.scatter.name}"


class InitWriter(KernelWriter):
    """The init launch: self's value stored into the scatter's output."""

    def __init__(self, graph, kernel: Kernel, scatter_node, bounds_check: bool = False):
        super().__init__(graph, kernel, bounds_check=bounds_check)
        self.scatter = scatter_node

    def _docstring(self) -> str:
        shape = ", ".join(map(str, self.domain))
        return f"scatter init: {self.scatter.inputs[0]} [{shape}] as the initial value of {self.scatter.name}"


def _reads(graph_nodes, kernel: Kernel, values) -> tuple[str, ...]:
    """The kernel inputs that computing `values` reads (through members and views), in kernel order."""
    inside = set(kernel.nodes)
    found, seen, stack = set(), set(), list(values)
    while stack:
        value = stack.pop()
        if value in seen:
            continue
        seen.add(value)
        if value in kernel.inputs:
            found.add(value)
        elif value in inside:
            stack.extend(graph_nodes[value].inputs)
    return tuple(v for v in kernel.inputs if v in found)


def _launch(graph, kernel: Kernel, writer: KernelWriter, outputs: tuple[str, ...]) -> tuple[TritonKernel, Step]:
    src = writer.write()
    sizes = dict(src.sizes)
    triton_kernel = TritonKernel(
        name=kernel.name, source=src.source,
        args=tuple(f"in_ptr{i}" for i in range(len(kernel.inputs))) + tuple(f"out_ptr{i}" for i in range(len(outputs))),
        sizes=src.sizes, grid=((sizes["xnumel"], "XBLOCK"),),
        configs=pointwise_configs(sizes["xnumel"], upper_bound(sizes["xnumel"], graph.symbols)),
    )
    return triton_kernel, Step("launch", kernel.name, tuple(kernel.inputs), outputs)


def scatter_launches(graph, kernel: Kernel, bounds_check: bool = False) -> tuple[list[TritonKernel], list[Step]]:
    """The init launch and the scatter launch of a `scatter` KernelPlan kernel."""
    nodes = graph.node_map()
    (scatter,) = [nodes[n] for n in kernel.nodes if n in nodes and nodes[n].op == "scatter"]
    if kernel.outputs != (scatter.name,):
        raise CodegenError(f"{kernel.name}: a scatter kernel stores its scatter only, not {kernel.outputs}")
    base = scatter.inputs[0]
    init = Kernel(f"{kernel.name}_init", "pointwise", kernel.nodes, (base,), _reads(nodes, kernel, [base]),
                  tuple(graph.types()[base].shape))
    body = Kernel(kernel.name, "pointwise", kernel.nodes, (scatter.name,),
                  _reads(nodes, kernel, scatter.inputs[1:]), tuple(kernel.domain))
    first = _launch(graph, init, InitWriter(graph, init, scatter, bounds_check), (scatter.name,))
    second = _launch(graph, body, ScatterWriter(graph, body, scatter, bounds_check), (scatter.name,))
    return [first[0], second[0]], [first[1], second[1]]

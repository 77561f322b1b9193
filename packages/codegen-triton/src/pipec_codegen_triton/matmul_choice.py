"""A matmul kernel with an epilogue -> two alternatives, one choice group (docs/IR.md, "Choice groups").

- "template": one launch of the Triton GEMM template with the epilogue on its tile
  (`matmul_template.py`); the default when nothing is measured.
- "library": cuBLAS, then one pointwise kernel for whatever of the epilogue is left.
  A bias add of a row vector goes into the library call (`aten.addmm`, cuBLASLt's bias
  epilogue), as eager does for `nn.Linear`.

Both alternatives write the kernel's outputs; running every step in order is also
correct (the second simply overwrites the first), so a runtime that ignores choice
attrs still computes the right thing. The runtime times both on the GPU and keeps
the faster per size bucket.
"""

from __future__ import annotations

import sympy
from pipec_ir import CompileOptions, Graph, Kernel, Ref, Step, TritonKernel, make_attrs
from pipec_ir.indexing import view_source_index
from pipec_ir.ops import VIEW, kind_of
from pipec_ir.symbolic import index_symbol

from .configs import pointwise_configs, upper_bound
from .matmul_template import MATMUL_OPS, epilogue_inputs, epilogue_refinement, value_at, write_template
from .writer import KernelWriter

_LIBRARY = {"mm": "aten.mm.default", "bmm": "aten.bmm.default"}


def _root(nodes, value: str) -> str:
    while value in nodes and kind_of(nodes[value].op) == VIEW:
        value = nodes[value].inputs[0]
    return value


def _row_vector_bias(graph: Graph, kernel: Kernel, product: str):
    """(add node, bias tensor) when the product's only use is `add(product, bias)` with bias a
    row vector broadcast over rows ([N] or [1, N], the product's dtype): that add is `addmm`."""
    nodes, types = graph.node_map(), graph.types()
    if nodes[product].op != "mm" or product in kernel.outputs:
        return None
    readers = [n for n in kernel.nodes if product in nodes[n].inputs]
    if len(readers) != 1 or nodes[readers[0]].op != "add":
        return None
    add = nodes[readers[0]]
    others = [v for v in add.inputs if v != product]
    if len(others) != 1 or add.type.dtype != nodes[product].type.dtype:
        return None
    i, j = index_symbol("i_bias"), index_symbol("j_bias")
    value, index = others[0], (i, j)
    while value in nodes and kind_of(nodes[value].op) == VIEW:
        node = nodes[value]
        index = view_source_index(node, index, types[node.inputs[0]])
        value = node.inputs[0]
    n = nodes[product].type.shape[1]
    shape, dtype = tuple(types[value].shape), types[value].dtype
    row = (shape == (n,) and tuple(index) == (j,)) or (shape == (1, n) and tuple(index) == (0, j))
    if not row or dtype != add.type.dtype or sympy.sympify(n) == 1:
        return None
    return add.name, value


class ReshapedEpilogueWriter(KernelWriter):
    """The pointwise epilogue after cuBLAS when its values are reshapes of the product
    ([B*T, N] and [B, T, N]): one program per block of the common refinement's flat index,
    which is every output's own flat index, each output evaluated at its view of that point."""

    def _pointwise_output(self, out: str) -> str:
        return value_at(self, self.domain, out)


def library_alternative(graph: Graph, kernel: Kernel, options: CompileOptions):
    """cuBLAS (mm, bmm or addmm) plus a pointwise kernel for the rest of the epilogue."""
    nodes = graph.node_map()
    product = next(n for n in kernel.nodes if nodes[n].op in MATMUL_OPS)
    a, b = nodes[product].inputs
    bias = _row_vector_bias(graph, kernel, product)
    if bias is not None:
        written, bias_value = bias
        call = Step("extern", "aten.addmm.default", (bias_value, a, b), (written,),
                    make_attrs(args=(Ref(bias_value), Ref(a), Ref(b)), kwargs=()))
    else:
        written = product
        call = Step("extern", _LIBRARY[nodes[product].op], (a, b), (product,),
                    make_attrs(args=(Ref(a), Ref(b)), kwargs=()))
    rest = [n for n in kernel.nodes if n not in (product, written)]
    outputs = tuple(o for o in kernel.outputs if o != written)
    if not outputs:
        return [], [call]
    inputs = epilogue_inputs(graph, rest, written)
    if any(_root(nodes, v) == written for n in rest for v in nodes[n].inputs):
        inputs = (written, *inputs)
    refined = epilogue_refinement(graph, rest, product)
    ep = Kernel(f"{kernel.name}_epilogue", "pointwise", tuple(rest), outputs, inputs, tuple(refined or kernel.domain))
    src = (ReshapedEpilogueWriter if refined else KernelWriter)(graph, ep).write()
    xnumel = dict(src.sizes)["xnumel"]
    launch = TritonKernel(
        name=ep.name, source=src.source,
        args=tuple(f"in_ptr{i}" for i in range(len(inputs))) + tuple(f"out_ptr{i}" for i in range(len(outputs))),
        sizes=src.sizes, grid=((xnumel, "XBLOCK"),),
        configs=pointwise_configs(xnumel, upper_bound(xnumel, graph.symbols)),
    )
    return [launch], [call, Step("launch", ep.name, inputs, outputs)]


def _tagged(step: Step, group: str, alternative: str, default: bool) -> Step:
    attrs = dict(step.attrs)
    attrs.update(choice=group, alternative=alternative)
    if default:
        attrs["default"] = True
    return Step(step.kind, step.target, step.inputs, step.outputs, make_attrs(**attrs))


def matmul_with_epilogue(graph: Graph, kernel: Kernel, options: CompileOptions):
    """(Triton kernels, steps) of a matmul kernel that holds an epilogue.

    Codegen option `matmul_template` (default True): False emits only the library alternative."""
    lib_kernels, lib_steps = library_alternative(graph, kernel, options)
    template = write_template(graph, kernel) if options.get("matmul_template", True) else None
    if template is None:
        return lib_kernels, lib_steps
    launch = Step("launch", kernel.name, template.inputs, tuple(kernel.outputs))
    steps = [_tagged(launch, kernel.name, "template", True)]
    steps += [_tagged(s, kernel.name, "library", False) for s in lib_steps]
    return [template.kernel, *lib_kernels], steps

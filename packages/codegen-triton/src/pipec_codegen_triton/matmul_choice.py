"""A matmul kernel with an epilogue -> alternatives in one choice group (docs/IR.md, "Choice groups").

- "template": one launch of the Triton GEMM template with the epilogue on its tile
  (`matmul_template.py`); the default when nothing is measured.
- "pingpong": the Gluon ping-pong kernel with the same epilogue (`matmul_gluon.py`), for a large
  16-bit product whose epilogue is costly (an exact GELU): Hopper only, never the default.
- "library", "library_mm", "library_act": cuBLAS, then one pointwise kernel for whatever of
  the epilogue is left (`library_alternatives` says which calls each makes).

All alternatives write the kernel's outputs; running every step in order is also
correct (the second simply overwrites the first), so a runtime that ignores choice
attrs still computes the right thing. The runtime times both on the GPU and keeps
the faster per size bucket.
"""

from __future__ import annotations

import sympy
from pipec_ir import CompileOptions, Graph, Kernel, Ref, Step, TensorType, TritonKernel, get_attr, make_attrs
from pipec_ir.indexing import view_source_index
from pipec_ir.ops import MATMUL_OPS, POINTWISE, VIEW, kind_of
from pipec_ir.symbolic import index_symbol, numel

from .configs import pointwise_configs, upper_bound
from .matmul_template import epilogue_inputs, epilogue_refinement, value_at, write_template
from .view_steps import reshape_args
from .writer import KernelWriter

_LIBRARY = {"mm": "aten.mm.default", "bmm": "aten.bmm.default"}


def library_target(node, types) -> str:
    """The extern target of a library product: `pipec.mm_padded` (docs/IR.md) for a 2-D fp16/bf16
    product whose static M, N or K is not a multiple of 8 (cuBLAS's fast kernels need 16-byte
    aligned rows; the runtime pads large ones), else the ATen op."""
    if node.op == "mm" and types[node.name].dtype in ("float16", "bfloat16"):
        a, b = (types[i].shape for i in node.inputs)
        dims = (a[0], a[1], b[1])
        if all(d.is_Integer for d in dims) and any(int(d) % 8 for d in dims):
            return "pipec.mm_padded.default"
    return _LIBRARY[node.op]


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


def _activation_of(graph: Graph, kernel: Kernel, add: str):
    """(nodes from the bias add to the activation, use_gelu) when the biased product's only use is
    ReLU or tanh-GELU, the two activations cuBLASLt applies in its epilogue (`_addmm_activation`,
    whose GELU is the tanh approximation there: an exact GELU never maps to it), possibly
    through the reshape `nn.Linear` on [B, T, K] puts between them; None otherwise."""
    nodes = graph.node_map()
    chain = [add]
    while True:
        readers = [n for n in kernel.nodes if chain[-1] in nodes[n].inputs]
        if chain[-1] in kernel.outputs or len(readers) != 1:
            return None
        node = nodes[readers[0]]
        if node.op != "reshape":
            break
        chain.append(node.name)
    if node.type.dtype != nodes[add].type.dtype:
        return None
    if node.op == "relu":
        return (*chain, node.name), False
    if node.op == "gelu" and get_attr(node.attrs, "approximate", "none") == "tanh":
        return (*chain, node.name), True
    return None


def _library_steps(graph: Graph, kernel: Kernel, product: str, call: Step, folded: tuple[str, ...], suffix: str,
                   bounds_check: bool = False):
    """`call` (the library matmul computing the nodes `folded`, product first; it writes the
    last of them) plus one pointwise kernel for the rest of the kernel's nodes."""
    nodes = graph.node_map()
    written = folded[-1]
    rest = [n for n in kernel.nodes if n not in folded]
    outputs = tuple(o for o in kernel.outputs if o != written)
    if not outputs:
        return [], [call]
    inputs = epilogue_inputs(graph, rest, written)
    if any(_root(nodes, v) == written for n in rest for v in nodes[n].inputs):
        inputs = (written, *inputs)
    refined = epilogue_refinement(graph, rest, product)
    ep = Kernel(f"{kernel.name}{suffix}", "pointwise", tuple(rest), outputs, inputs, tuple(refined or kernel.domain))
    src = (ReshapedEpilogueWriter if refined else KernelWriter)(graph, ep, bounds_check=bounds_check).write()
    xnumel = dict(src.sizes)["xnumel"]
    launch = TritonKernel(
        name=ep.name, source=src.source,
        args=tuple(f"in_ptr{i}" for i in range(len(inputs))) + tuple(f"out_ptr{i}" for i in range(len(outputs))),
        sizes=src.sizes, grid=((xnumel, "XBLOCK"),),
        configs=pointwise_configs(xnumel, upper_bound(xnumel, graph.symbols)),
    )
    # the pointwise pass may write over the library's result, which dies there (the memory plan
    # confirms it does): cuBLAS's [M, N] and the epilogue's output are then one activation, not two
    donor = _epilogue_donor(graph, rest, written, inputs, outputs)
    attrs = make_attrs(inplace=((outputs[0], written),)) if donor else ()
    return [launch], [call, Step("launch", ep.name, inputs, outputs, attrs)]


def _epilogue_donor(graph: Graph, rest: list[str], written: str, inputs: tuple, outputs: tuple) -> bool:
    """Whether the epilogue's one output may be written in place of `written` (the library
    call's result): same dtype and element count, and every node between them pointwise or a
    reshape of that count, so each element of `written` is read only where the same program
    writes the output's element at the same flat index (reshapes of contiguous values keep flat
    indices), and before the one store at the end."""
    if len(outputs) != 1 or written not in inputs:
        return False
    nodes, types = graph.node_map(), graph.types()
    size = numel(types[written].shape)
    if types[outputs[0]].dtype != types[written].dtype or sympy.expand(numel(types[outputs[0]].shape) - size) != 0:
        return False
    reached = {written}
    for name in rest:  # kernel order is topological
        node = nodes[name]
        if not reached.intersection(node.inputs):
            continue
        if kind_of(node.op) != POINTWISE and node.op != "reshape":
            return False
        if sympy.expand(numel(node.type.shape) - size) != 0:
            return False
        reached.add(name)
    return outputs[0] in reached


def library_alternatives(graph: Graph, kernel: Kernel, options: CompileOptions) -> dict[str, tuple]:
    """name -> (Triton kernels, steps, {value: type} of values it makes for itself) of each cuBLAS
    alternative:

    - "library": `mm`/`bmm`, or `addmm` when a row-vector bias add follows (cuBLASLt's bias
      epilogue, as eager's `nn.Linear`), then one pointwise kernel for the rest;
    - "library_mm" (only with such a bias): plain `mm` with the bias in the pointwise kernel.
      cuBLASLt's bias path picks slow split-K kernels for small fp32 products (docs/performance.md,
      "`library_mm`"), which is what Inductor does;
    - "library_act" (bias, then ReLU or tanh-GELU): cuBLASLt's bias + activation epilogue
      (`aten._addmm_activation`; for GELU the runtime's `pipec.addmm_gelu_tanh`): the GEMM writes
      the activation and no pointwise pass is left for it."""
    nodes = graph.node_map()
    product = next(n for n in kernel.nodes if nodes[n].op in MATMUL_OPS)
    a, b = nodes[product].inputs
    checked = bool(options.get("bounds_check", False))
    plain = Step("extern", library_target(nodes[product], graph.types()), (a, b), (product,),
                 make_attrs(args=(Ref(a), Ref(b)), kwargs=()))
    bias = _row_vector_bias(graph, kernel, product)
    if bias is None:
        return {"library": (*_library_steps(graph, kernel, product, plain, (product,), "_epilogue", checked), {})}
    add, bias_value = bias
    addmm = Step("extern", "aten.addmm.default", (bias_value, a, b), (add,),
                 make_attrs(args=(Ref(bias_value), Ref(a), Ref(b)), kwargs=()))
    out = {"library": (*_library_steps(graph, kernel, product, addmm, (product, add), "_epilogue", checked), {}),
           "library_mm": (*_library_steps(graph, kernel, product, plain, (product,), "_mm_epilogue", checked), {})}
    activation = _activation_of(graph, kernel, add)
    if activation is not None:
        chain, use_gelu = activation
        act = chain[-1]
        # the call's [M, N] result; reshaped to the activation's shape when a reshape sits between
        result = act if len(chain) == 2 else f"{act}__{product}"
        # ReLU is `_addmm_activation` everywhere; its GELU is tanh only on CUDA (exact on the CPU),
        # so tanh-GELU goes through the runtime's `pipec.addmm_gelu_tanh`, the same on every device
        if use_gelu:
            call = Step("extern", "pipec.addmm_gelu_tanh.default", (bias_value, a, b), (result,),
                        make_attrs(args=(Ref(bias_value), Ref(a), Ref(b)), kwargs=()))
        else:
            call = Step("extern", "aten._addmm_activation.default", (bias_value, a, b), (result,),
                        make_attrs(args=(Ref(bias_value), Ref(a), Ref(b)), kwargs=(("use_gelu", False),)))
        kernels, steps = _library_steps(graph, kernel, product, call, (product, *chain), "_act_epilogue", checked)
        own = {}
        if result != act:
            types = graph.types()
            own[result] = TensorType(types[product].shape, types[act].dtype)
            reshape = Step("extern", "aten.reshape.default", (result,), (act,),
                           make_attrs(args=reshape_args(Ref(result), types[act].shape), kwargs=()))
            steps.insert(1, reshape)
        out["library_act"] = (kernels, steps, own)
    return out


def _tagged(step: Step, group: str, alternative: str, default: bool) -> Step:
    attrs = dict(step.attrs)
    attrs.update(choice=group, alternative=alternative)
    if default:
        attrs["default"] = True
    return Step(step.kind, step.target, step.inputs, step.outputs, make_attrs(**attrs))


def matmul_with_epilogue(graph: Graph, kernel: Kernel, options: CompileOptions):
    """(Triton kernels, steps, {value: type} of values only an alternative makes) of a matmul
    kernel that holds an epilogue.

    Codegen option `matmul_template` (default True): False emits only the library alternative.
    Option `max_autotune` (the max-autotune modes): every alternative and config, none left out to
    save compile time (`write_template`'s `exhaustive`)."""
    libraries = library_alternatives(graph, kernel, options)
    if not options.get("matmul_template", True):
        return libraries["library"]
    exhaustive = bool(options.get("max_autotune", False))
    # Where cuBLASLt applies the activation in its own epilogue ("library_act": ReLU, tanh-GELU)
    # the ping-pong kernel has nothing to hide and only costs compile time (it lost to cuBLASLt on
    # GPT-2's fc GEMM: docs/performance.md, "No ping-pong kernel where cuBLASLt applies the activation")
    template = write_template(graph, kernel, pingpong=exhaustive or "library_act" not in libraries,
                              exhaustive=exhaustive, bounds_check=bool(options.get("bounds_check", False)))
    if template is None and len(libraries) == 1:
        return libraries["library"]
    kernels, steps, own_values = [], [], {}
    if template is not None:
        launch = Step("launch", kernel.name, template.inputs, tuple(kernel.outputs))
        kernels.append(template.kernel)
        steps.append(_tagged(launch, kernel.name, "template", True))
    if template is not None and template.pingpong is not None:  # GPU only: never the default
        launch = Step("launch", template.pingpong.name, template.inputs, tuple(kernel.outputs))
        kernels.append(template.pingpong)
        steps.append(_tagged(launch, kernel.name, "pingpong", False))
    for name, (lib_kernels, lib_steps, own) in libraries.items():
        kernels += lib_kernels
        own_values.update(own)
        default = template is None and name == "library"
        steps += [_tagged(s, kernel.name, name, default) for s in lib_steps]
    return kernels, steps, own_values

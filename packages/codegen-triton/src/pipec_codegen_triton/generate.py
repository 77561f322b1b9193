"""KernelPlan -> Program: Triton source per kernel, library calls, memory plan."""

from __future__ import annotations

import sympy
from pipec_ir import (
    CompileOptions, KernelPlan, Program, Ref, Step, TritonKernel, attr_expr, make_attrs, size_attr, verify,
)
from pipec_ir.ops import collective_call
from pipec_ir.symbolic import parse_expr
from pipec_ir.types import Buffer, TensorType, get_attr

from .configs import (
    PERSISTENT_ROW_BYTES, PERSISTENT_SCAN_BYTES, pointwise_configs, reduction_configs, tiled_configs, upper_bound,
)
from .combo_kernels import combine_launches
from .matmul_choice import library_target, matmul_with_epilogue
from .matmul_siblings import group_sibling_matmuls
from .view_steps import VIEW_TARGETS, reshape_args
from .kernel_memo import WrittenKernels
from .memory_plan import plan_program_memory, writes_in_place
from .padding import pad_symbols
from .scan import ScanWriter
from .scatter import scatter_launches
from .kernel_source import CodegenError
from .writer import KernelWriter

def _view_args(node, source_type) -> tuple:
    """The ATen arguments of a view step. Symbolic sizes are `Size` leaves the runtime
    evaluates with the bound symbol values; a reshape with one symbolic dim uses -1 there
    and an expand keeps (-1) the dims it does not broadcast (docs/IR.md, "Symbolic sizes")."""
    ref = Ref(node.inputs[0])
    shape = tuple(sympy.sympify(s) for s in node.type.shape)
    if node.op == "reshape":
        return reshape_args(ref, shape)
    if node.op == "expand":
        src = tuple(sympy.sympify(s) for s in source_type.shape)
        offset = len(shape) - len(src)
        return (ref, tuple(-1 if d >= offset and not s.is_Integer and sympy.expand(src[d - offset] - s) == 0
                           else size_attr(s) for d, s in enumerate(shape)))
    if node.op == "permute":
        return (ref, tuple(node.attr("dims")))
    if node.op == "slice":
        dim, start, step = node.attr("dim"), attr_expr(node.attr("start")), node.attr("step")
        return (ref, dim, size_attr(start), size_attr(start + step * shape[dim]), step)
    if node.op == "select":
        return (ref, node.attr("dim"), node.attr("index"))
    raise CodegenError(f"no view target for {node.op}")


def _library_step(kernel, nodes, types) -> Step:
    node = nodes[kernel.nodes[0]]
    if kernel.kind == "view":
        return Step("extern", VIEW_TARGETS[node.op], (node.inputs[0],), (node.name,),
                    make_attrs(args=_view_args(node, types[node.inputs[0]]), kwargs=()))
    if kernel.kind == "matmul":
        return Step("extern", library_target(node, types), tuple(node.inputs), (node.name,),
                    make_attrs(args=tuple(Ref(i) for i in node.inputs), kwargs=()))
    # extern: its results are the node itself, or one per getitem
    results = get_attr(node.attrs, "results")
    if results is None:
        outputs = (node.name,)
    else:
        by_index = {nodes[n].attr("index"): n for n in kernel.nodes[1:]}
        outputs = tuple(by_index.get(i, f"{node.name}__unused{i}") for i in range(len(results)))
    return Step("extern", node.attr("target"), tuple(node.inputs), outputs,
                make_attrs(args=node.attr("args"), kwargs=node.attr("kwargs")))


def _collective_step(node) -> Step:
    """A collective runs as torch's functional collective of the same name (the runtime's extern
    path: torch.distributed issues it on the named process group). Not a fresh-memory call to the
    memory plan, so a start's input lives until its wait's result dies: the process group may
    still read it while the data is in flight (all_gather_into_tensor does)."""
    target, args = collective_call(node)
    return Step("extern", target, tuple(node.inputs), (node.name,), make_attrs(args=args, kwargs=()))


def _padded_library_call(kernel, nodes, types) -> bool:
    """Whether a plain product's library call is `pipec.mm_padded` (a half-precision M, N or K not
    a multiple of 8). The Triton template is then its alternative: it reads and writes unaligned
    rows as they are, where cuBLAS's call pays for padded copies of its operands and, when N is
    unaligned, for copying its padded result back to contiguous rows (GPT-2's 50257-word LM head:
    a 473 us copy after a 445 us GEMM, and 412 MB more peak memory; docs/performance.md,
    "Unaligned products")."""
    node = nodes[kernel.nodes[0]]
    return library_target(node, types) == "pipec.mm_padded.default"


def _count_option(options: CompileOptions, name: str) -> int | None:
    """An option that is a count (elements, bytes): a non-negative integer, or None when not given."""
    value = options.get(name)
    if value is None:
        return None
    try:
        count = int(value)
    except (TypeError, ValueError):
        count = -1
    if count < 0 or (isinstance(value, float) and value != count) or isinstance(value, bool):
        raise CodegenError(f"{name} must be a non-negative integer, got {value!r}")
    return count


def _flag_option(options: CompileOptions, name: str, default: bool = False) -> bool:
    """An on/off option: True or False (absent: `default`)."""
    value = options.get(name, default)
    if not isinstance(value, bool):
        raise CodegenError(f"{name} must be True or False, got {value!r}")
    return value


def generate_program(plan: KernelPlan, options: CompileOptions) -> Program:
    verify(plan)  # every node's declared type is what its op gives: codegen trusts node types
    graph = plan.graph
    nodes = graph.node_map()
    types = graph.types()
    limit = _count_option(options, "persistent_reduction_limit")  # rows up to this many elements; default: by bytes
    row_bytes = _count_option(options, "persistent_reduction_bytes")  # default: the kernel kind's
    bounds_check = _flag_option(options, "bounds_check")  # assert every load's and store's range
    # transposing pointwise kernels in 2-d tiles (tiling.py): SD 1.5's UNet under CUDA Graphs
    # 10.21 -> 8.52 ms on an H100 (session 34), transformers unchanged
    tiles = _flag_option(options, "tiled_transposes", default=True)
    combos = _flag_option(options, "combo_kernels", default=True)  # small independent launches as one (combo_kernels.py)
    # products of one left operand (Q, K, V) also as one launch, an alternative the runtime times;
    # off by default: on the H100 it lost to the products one by one (docs/performance.md,
    # "Sibling GEMMs in one launch"), and its group misses the tuning table (a compile-time cost)
    siblings = _flag_option(options, "grouped_matmuls", default=False)
    kernels, steps, pointwise = [], [], set()
    written = WrittenKernels(nodes, types)  # a model's layers share their kernels' sources
    for kernel in plan.kernels:
        if kernel.kind in ("pointwise", "reduction", "scan"):
            writer = ScanWriter if kernel.kind == "scan" else KernelWriter
            default_bytes = PERSISTENT_SCAN_BYTES if kernel.kind == "scan" else PERSISTENT_ROW_BYTES

            def write(writer=writer, kernel=kernel, default_bytes=default_bytes):
                return writer(graph, kernel, persistent_limit=limit,
                              persistent_bytes=default_bytes if row_bytes is None else row_bytes,
                              bounds_check=bounds_check, tiles=tiles).write()

            # a bounds-checked kernel names its buffers in its assertions: written afresh
            src = write() if bounds_check else written.write(kernel, write)
            sizes = dict(src.sizes)
            if kernel.kind == "pointwise" and "ynumel" in sizes:  # in 2-d tiles (tiling.py)
                configs = tiled_configs(int(sizes["ynumel"]), int(sizes["xnumel"]))
                grid = ((sizes["ynumel"], "YBLOCK"), (sizes["xnumel"], "XBLOCK"))
            elif kernel.kind == "pointwise":
                configs = pointwise_configs(sizes["xnumel"], upper_bound(sizes["xnumel"], graph.symbols))
                grid = ((sizes["xnumel"], "XBLOCK"),)
                pointwise.add(kernel.name)
            else:
                configs = reduction_configs(sizes["xnumel"], sizes["rnumel"], src.persistent,
                                            upper_bound(sizes["xnumel"], graph.symbols), outer=src.outer_reduction)
                grid = ((sizes["xnumel"], "XBLOCK"),)
            kernels.append(TritonKernel(
                name=kernel.name, source=src.source,
                args=tuple(f"in_ptr{i}" for i in range(len(kernel.inputs)))
                + tuple(f"out_ptr{i}" for i in range(len(kernel.outputs))),
                sizes=src.sizes, grid=grid, configs=configs,
            ))
            steps.append(Step("launch", kernel.name, tuple(kernel.inputs), tuple(kernel.outputs)))
        elif kernel.kind == "matmul" and (len(kernel.nodes) > 1 or _padded_library_call(kernel, nodes, types)):
            # with an epilogue, or a product cuBLAS would take only padded: template or cuBLAS
            more_kernels, more_steps, own_values = matmul_with_epilogue(graph, kernel, options)
            types.update(own_values)  # results an alternative makes for itself
            kernels.extend(more_kernels)
            steps.extend(more_steps)
        elif kernel.kind == "scatter":  # an init launch, then the scatter launch (scatter.py)
            more_kernels, more_steps = scatter_launches(graph, kernel, bounds_check)
            kernels.extend(more_kernels)
            steps.extend(more_steps)
        elif kernel.kind in ("view", "matmul", "extern"):
            steps.append(_library_step(kernel, nodes, types))
        elif kernel.kind == "collective":
            steps.append(_collective_step(nodes[kernel.nodes[0]]))
        else:
            raise CodegenError(f"kernel {kernel.name}: unknown kind {kernel.kind!r}")
    for step in steps:  # unused results of multi-result externs still need a declared type
        for out in step.outputs:
            if out not in types and "__unused" in out:
                base, i = out.split("__unused")
                result = get_attr(nodes[base].attrs, "results")[int(i)]
                if result is None:  # an undefined result (e.g. convolution_backward's masked-off grads)
                    types[out] = TensorType((sympy.Integer(0),), "float32")
                    continue
                shape_strs, dtype = result
                types[out] = TensorType(tuple(parse_expr(s) for s in shape_strs), dtype)
    if siblings:
        steps, kernels = group_sibling_matmuls(steps, kernels)
    graph_outputs = set(graph.results())  # written values live to the end too
    steps, buffers, slots, peak = plan_program_memory(tuple(steps), types, graph_outputs, plan)
    steps, buffers, unlaunched = writes_in_place(steps, buffers, plan)
    kernels = [k for k in kernels if k.name not in unlaunched]
    if combos:
        steps, kernels = combine_launches(steps, kernels, buffers, pointwise, debug=bounds_check)
    program = Program(
        name=graph.name,
        inputs=tuple(Buffer(i.name, i.type) for i in graph.inputs),
        outputs=tuple(graph.outputs),
        buffers=buffers,
        kernels=tuple(kernels),
        steps=tuple(steps),
        slots=slots,
        symbols=graph.symbols,
        peak_bytes=peak,
        # an input written in place is the caller's memory: no padded copy of it
        pad_symbols=pad_symbols(graph) if graph.symbols and not graph.writes else (),
        writes=graph.writes,
    )
    return verify(program)


class TritonCodegen:
    """The `triton` codegen stage."""

    def generate(self, plan: KernelPlan, options: CompileOptions) -> Program:
        return generate_program(plan, options)

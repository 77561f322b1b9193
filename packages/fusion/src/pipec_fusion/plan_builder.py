"""Building a KernelPlan from the groups the fusion engine merged (engine.py): each group's
kernel (nodes, inputs, outputs, domain) and the view kernels, ordered (collectives' starts early,
waits late: `schedule_keys`), named readably, with the merges made and refused."""

from __future__ import annotations

import re

import networkx as nx
from pipec_ir import FusionDecision, Graph, Kernel, KernelPlan, RejectedFusion, verify
from pipec_ir.ops import COLLECTIVE_STARTS, MATMUL_OPS
from pipec_ir.verify import is_multi_result

from .analysis import GraphAnalysis
from .legality import Group


def _dedupe(values):
    seen, out = set(), []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return tuple(out)


def _compute_kernel(an: GraphAnalysis, group: Group) -> Kernel:
    members = sorted(group.members, key=an.pos)
    if group.kind == "matmul" and len(members) == 1:
        (name,) = members
        return Kernel("", "matmul", (name,), (name,), _dedupe(an.nodes[name].inputs), an.shape(name))
    if group.kind == "collective":
        (name,) = members
        return Kernel("", "collective", (name,), (name,), _dedupe(an.nodes[name].inputs), an.shape(name))
    if group.kind == "extern":
        ext = next(n for n in members if an.nodes[n].op == "extern")
        node = an.nodes[ext]
        if is_multi_result(node):
            outputs, domain = tuple(n for n in members if n != ext), ()
        else:
            outputs, domain = (ext,), an.shape(ext)
        return Kernel("", "extern", tuple(members), outputs, _dedupe(node.inputs), domain)
    views: set[str] = set()
    inputs = []
    for name in members:
        if an.nodes[name].op in MATMUL_OPS:  # a library call's operands: views stay tensors (view kernels)
            inputs.extend(an.nodes[name].inputs)
            continue
        for value in an.nodes[name].inputs:
            views.update(an.view_chain(value))
            root = an.root[value]
            if root not in group.members:
                inputs.append(root)
    nodes = tuple(sorted(group.members | views, key=an.pos))
    outputs = tuple(n for n in members if an.must_store(n, group.members))
    return Kernel("", group.kind, nodes, outputs, _dedupe(inputs), tuple(group.domain),
                  tuple(group.reduce_dims) if group.kind in ("reduction", "scan") else ())


def _view_kernel(an: GraphAnalysis, view: str) -> Kernel:
    return Kernel("", "view", (view,), (view,), (an.nodes[view].inputs[0],), an.shape(view))


def _kernel_name(an: GraphAnalysis, kernel: Kernel, index: int) -> str:
    ops = [an.nodes[n].op for n in kernel.nodes]
    if kernel.kind == "view":
        return f"pipec_view_{ops[0]}_{index}"
    if kernel.kind == "collective" or (kernel.kind == "matmul" and len(kernel.nodes) == 1):
        return f"pipec_{ops[0]}_{index}"
    if kernel.kind == "extern":
        ext = next(an.nodes[n] for n in kernel.nodes if an.nodes[n].op == "extern")
        parts = str(ext.attr("target")).split(".")
        short = parts[1] if len(parts) >= 2 else parts[0]
        short = re.sub(r"\W", "_", short).strip("_") or "op"
        return f"pipec_extern_{short}_{index}"
    compute = [an.nodes[n].op for n in kernel.nodes if not an.is_view(n)]
    if kernel.kind == "matmul":  # the product first: pipec_fused_mm_add_gelu_1
        compute.sort(key=lambda op: op not in MATMUL_OPS)
    if kernel.kind == "scatter":  # the scatter first: pipec_fused_scatter_mul_exp_2
        compute.sort(key=lambda op: op != "scatter")
    if len(compute) == 1:
        return f"pipec_{compute[0]}_{index}"
    named = _dedupe(op for op in compute if op != "full") or ("full",)
    return f"pipec_fused_{'_'.join(named[:4])}_{index}"


def schedule_keys(an: GraphAnalysis, kernels: list[Kernel], kdag: nx.DiGraph) -> dict[int, tuple]:
    """The order of the plan: kernel -> sort key of a topological sort taking the smallest key
    ready. A kernel keeps its place in the graph (its first computed node's position: the views it
    reads through may sit much earlier). A collective's
    start comes as early as its inputs allow, so its communication overlaps the kernels that
    follow; its `wait_tensor` as late as possible, just before its first reader (the smallest key
    among its readers), so every kernel placed before that reader runs while data is in flight.
    A wait nothing reads goes last, and so does a kernel nothing reads (it makes graph outputs)
    that reads only waits' results and graph inputs: moving it holds no other value longer, and
    its waits go last with it (the gradient copies of DDP's all-reduces under compiled autograd
    then overlap the whole rest of the backward)."""
    keys: dict[int, tuple] = {}
    made_by = {o: kernels[k] for k in kdag for o in kernels[k].outputs}
    waited = {o for k in kdag for o in kernels[k].outputs if an.nodes[kernels[k].nodes[0]].op == "wait_tensor"}
    last = float("inf")
    for k in reversed(list(nx.topological_sort(kdag))):
        kernel = kernels[k]
        # the place of what it computes, not of the views it reads through: a kernel reading a
        # bias made at the top of the graph (T5's position bias, one clone per layer) would
        # otherwise run there, its result held through every layer before (12 x 48 MiB)
        computed = [an.pos(n) for n in kernel.nodes if not an.is_view(n)]
        first = min(computed) if computed else min(an.pos(n) for n in kernel.nodes)
        op = an.nodes[kernel.nodes[0]].op
        if kernel.kind == "collective" and op in COLLECTIVE_STARTS:
            keys[k] = (-1, first, k)
        elif kernel.kind == "collective":  # wait_tensor
            readers = [keys[s] for s in kdag.successors(k)]
            if readers:
                a, b, c = min(readers)
                keys[k] = (a, b, c - 0.5)
            else:
                keys[k] = (last, first, k)
        elif not kdag.out_degree(k) and kernel.inputs and any(v in waited for v in kernel.inputs) and \
                all(v in waited or v not in made_by for v in kernel.inputs):
            keys[k] = (last, first, k)
        else:
            keys[k] = (first, 0, k)
    return keys


def build_plan(an: GraphAnalysis, groups: dict[int, Group], graph: Graph, policy: str, fusions,
               rejected) -> KernelPlan:
    """The KernelPlan of the merged `groups` ({group id: group}) of `graph`: a kernel per group
    and per view kernel, in schedule order, named, with the merges made and refused."""
    kernels: list[Kernel] = []
    group_of_kernel: dict[int, int] = {}
    for gid, group in sorted(groups.items()):
        group_of_kernel[len(kernels)] = gid
        kernels.append(_compute_kernel(an, group))
    kernels.extend(_view_kernel(an, v) for v in an.view_kernels)

    producer = {o: k for k, kernel in enumerate(kernels) for o in kernel.outputs}
    kdag = nx.DiGraph()
    kdag.add_nodes_from(range(len(kernels)))
    for k, kernel in enumerate(kernels):
        for value in kernel.inputs:
            if value in producer and producer[value] != k:
                kdag.add_edge(producer[value], k)
    kernel_of = {n: k for k, kernel in enumerate(kernels) for n in kernel.nodes}
    for earlier, later in an.seeded_order():  # draws from torch's generator run in graph order
        if kernel_of[earlier] != kernel_of[later]:
            kdag.add_edge(kernel_of[earlier], kernel_of[later])
    keys = schedule_keys(an, kernels, kdag)
    order = list(nx.lexicographical_topological_sort(kdag, key=keys.__getitem__))

    final: list[Kernel] = []
    kernel_of_group: dict[int, str] = {}
    kernel_of_node: dict[str, str] = {}
    for index, k in enumerate(order):
        kernel = kernels[k]
        name = _kernel_name(an, kernel, index)
        final.append(Kernel(name, kernel.kind, kernel.nodes, kernel.outputs, kernel.inputs, kernel.domain,
                            kernel.reduce_dims))
        if k in group_of_kernel:
            kernel_of_group[group_of_kernel[k]] = name
            for n in kernel.nodes:
                if not an.is_view(n):
                    kernel_of_node[n] = name

    decisions = tuple(FusionDecision(kernel_of_node[first[0]], first, second, kind, score)
                      for first, second, kind, score in fusions)
    rejections = []
    seen = set()
    for first, second, reason, through in rejected:
        if through is not None:
            reason = f"would create a cycle through {kernel_of_group[through]}"
        if (first, second) not in seen:
            seen.add((first, second))
            rejections.append(RejectedFusion(first, second, reason))
    plan = KernelPlan(graph, policy, tuple(final), decisions, tuple(rejections))
    return verify(plan)

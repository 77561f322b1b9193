"""Readable text form of IR documents (used by --dump-ir and in error messages)."""

from __future__ import annotations

from . import types as ir


def _attrs(attrs) -> str:
    return ", ".join(f"{k}={_value(v)}" for k, v in attrs)


def _value(v) -> str:
    if isinstance(v, ir.Ref):
        return f"%{v.name}"
    if isinstance(v, ir.Dtype):
        return v.name
    if isinstance(v, ir.Device):
        return "device"
    if isinstance(v, ir.Size):
        return f"({v.expr})"
    if isinstance(v, tuple):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return repr(v)


def format_node(node: ir.Node) -> str:
    args = ", ".join(node.inputs)
    extra = _attrs(node.attrs)
    call = ", ".join(p for p in (args, extra) if p)
    return f"{node.name} = {node.op}({call})  # {node.type}"


def format_graph(graph: ir.Graph) -> str:
    lines = [f"def {graph.name}({', '.join(i.name for i in graph.inputs)}):"]
    for i in graph.inputs:
        lines.append(f"    # {i.name}: {i.role} {i.type}")
    for s in graph.symbols:
        lines.append(f"    # {s.name} in [{s.lower}, {s.upper if s.upper is not None else 'inf'}]")
    lines.extend("    " + format_node(n) for n in graph.nodes)
    lines.extend(f"    {target} <- {value}  # the input holds it after a run" for target, value in graph.writes)
    lines.append(f"    return ({', '.join(str(o) for o in graph.outputs)})")
    return "\n".join(lines)


def format_plan(plan: ir.KernelPlan) -> str:
    nodes = plan.graph.node_map()
    lines = [f"# kernel plan for {plan.graph.name}, policy {plan.policy!r}: {len(plan.kernels)} kernels"]
    for k in plan.kernels:
        dom = f" domain=[{', '.join(map(str, k.domain))}]" if k.domain else ""
        red = f" reduce={list(k.reduce_dims)}" if k.reduce_dims else ""
        lines.append(f"kernel {k.name} ({k.kind}{dom}{red}) reads ({', '.join(k.inputs)}) writes ({', '.join(k.outputs)}):")
        lines.extend("    " + format_node(nodes[n]) for n in k.nodes)
    for f in plan.fusions:
        lines.append(f"# fused ({f.kind}, score {f.score:g}) into {f.kernel}: {list(f.first)} + {list(f.second)}")
    for r in plan.rejected:
        lines.append(f"# not fused: {r.first} + {r.second}: {r.reason}")
    return "\n".join(lines)


def format_program(prog: ir.Program) -> str:
    lines = [f"# program {prog.name}: {len(prog.kernels)} kernels, {len(prog.steps)} steps, "
             f"{len(prog.slots)} memory slots, peak {prog.peak_bytes} bytes"]
    if prog.pad_symbols:
        lines.append(f"# inputs may be padded along: {', '.join(prog.pad_symbols)}")
    lines.append(f"def {prog.name}({', '.join(b.name for b in prog.inputs)}):")
    slot_of = {b.name: b.slot for b in prog.buffers}
    types = {b.name: b.type for b in (*prog.inputs, *prog.buffers)}
    for s in prog.steps:
        outs = ", ".join(s.outputs)
        notes = "; ".join(f"{o}: {types[o]}" + (f" slot {slot_of[o]}" if slot_of.get(o) is not None else "")
                          for o in s.outputs if o in types)
        extra = (", " + _attrs(s.attrs)) if s.attrs else ""
        lines.append(f"    {outs} = {s.kind} {s.target}({', '.join(s.inputs)}{extra})  # {notes}")
    lines.extend(f"    {target} <- {value}  # the input holds it after a run" for target, value in prog.writes)
    lines.append(f"    return ({', '.join(str(o) for o in prog.outputs)})")
    for k in prog.kernels:
        lines.append("")
        lines.append(f"# ---- {k.name}: configs {[dict(c.constants) for c in k.configs]}")
        lines.append(k.source.rstrip())
    return "\n".join(lines)


def format_document(doc) -> str:
    if isinstance(doc, ir.Graph):
        return format_graph(doc)
    if isinstance(doc, ir.KernelPlan):
        return format_plan(doc)
    if isinstance(doc, ir.Program):
        return format_program(doc)
    raise TypeError(f"not an IR document: {type(doc).__name__}")

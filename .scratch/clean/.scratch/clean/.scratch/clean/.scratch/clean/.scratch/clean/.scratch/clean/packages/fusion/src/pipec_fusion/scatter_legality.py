"""Legality of scatter kernels (docs/IR.md, `scatter`).

A scatter kernel holds one `scatter(self, index, src)` node. Its domain is the index's
shape: one program instance per written element. Codegen runs it as two launches, an
*init* over self's shape that stores self into the output, then the scatter proper,
which stores or atomically accumulates src at the positions. So a scatter kernel may
hold, besides the scatter:
- a *prologue*: pointwise, creation and `take` producers of the index and src,
  evaluated at the domain's points;
- an *init*: pointwise and creation producers of self (a `zeros` the gradients are
  added into), evaluated at self's points.
Members are recomputed wherever they are read (a broadcast index is computed per
element), never stored: a member read outside the kernel stays in its own. The scatter's
output exists only once every program instance has run, so nothing reading it fuses
into the scatter's kernel: it starts a new one.
"""

from __future__ import annotations

from pipec_ir import kind_of

from .analysis import GraphAnalysis, shape_str

SCATTER = "scatter"
_FUSIBLE_KINDS = ("pointwise", "creation", "indexing")


def scatter_merge(an: GraphAnalysis, first, second, kind: str, group_cls):
    """(reason, merged group) for merging two groups of which at least one is a scatter."""
    if first.kind == SCATTER and second.kind == SCATTER:
        return "a scatter kernel holds one scatter", None
    if kind != "vertical":
        return "a scatter kernel fuses only producers of its operands", None
    if first.kind == SCATTER:
        return ("a scatter's result is complete only after every program instance ran: "
                "its readers start a new kernel"), None
    if first.kind != "pointwise":
        return f"a scatter kernel fuses only pointwise producers, not a {first.kind}", None
    return None, group_cls(SCATTER, first.members | second.members, second.domain)


def check_scatter_group(an: GraphAnalysis, group) -> tuple[str | None, frozenset]:
    """(reason or None, members recomputed at more points than they have elements)."""
    scatters = [n for n in group.members if an.nodes[n].op == "scatter"]
    if len(scatters) != 1:
        return f"a scatter kernel holds one scatter, not {len(scatters)}", frozenset()
    (scatter,) = scatters
    node = an.nodes[scatter]
    init = _producers(an, group.members, [node.inputs[0]])
    prologue = _producers(an, group.members, node.inputs[1:])
    recomputed = set()
    for side, domain in ((init, an.shape(node.inputs[0])),
                         (prologue, group.domain)):
        for name in sorted(side, key=an.pos):
            member = an.nodes[name]
            if kind_of(member.op) not in _FUSIBLE_KINDS or member.op == "scatter":
                return (f"{name} ({member.op}) cannot run inside scatter kernel of {scatter}: only pointwise "
                        "producers of its operands fuse"), frozenset()
            if an.must_store(name, group.members):
                return (f"{name} is read outside the scatter kernel of {scatter}; its members are recomputed "
                        "where read, never stored"), frozenset()
            if member.op == "take" and an.root[member.inputs[0]] in group.members:
                return (f"{name} reads {an.root[member.inputs[0]]} at data-dependent positions: "
                        "a take's source must come from memory"), frozenset()
            if an.numel_hint(an.shape(name)) < an.numel_hint(domain):
                recomputed.add(name)
    stray = group.members - init - prologue - {scatter}
    if stray:
        name = min(stray, key=an.pos)
        return f"{name} feeds no operand of scatter {scatter} {shape_str(group.domain)}", frozenset()
    return None, frozenset(recomputed)


def _producers(an: GraphAnalysis, members, values) -> set[str]:
    """The members computing `values` (through views), directly or through other members."""
    out: set[str] = set()
    stack = [an.root[v] for v in values]
    while stack:
        name = stack.pop()
        if name not in members or name in out:
            continue
        out.add(name)
        stack.extend(an.root[v] for v in an.nodes[name].inputs)
    return out

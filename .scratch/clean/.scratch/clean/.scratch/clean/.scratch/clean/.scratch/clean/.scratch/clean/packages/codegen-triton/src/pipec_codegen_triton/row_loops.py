"""Which reductions of a looped reduction kernel share one pass over the row.

A row too long for registers is read once per loop over it, so fewer loops means fewer
reads. Reductions that do not depend on one another share a loop (sum and max of the
same row), and two dependent pairs are rewritten to need only one loop:

* online softmax (Milakov & Gimelshein, 2018): `max(a)` then `sum(exp(a - max))` keep a
  running max per lane and a running sum rescaled by `exp(old max - new max)`;
* Welford: `sum(a)`, `mean = sum / n`, then `sum((a - mean)**2)` keep a running
  (mean, M2, count) per lane, merged across lanes at the end (Chan et al.).

So softmax, log_softmax and layer_norm read their row twice (the reductions, then the
normalised output) instead of three times. This module only reads the IR; writer.py
emits the loops.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy
from pipec_ir import Size
from pipec_ir.ops import REDUCTION, VIEW, kind_of

from .dtypes import FLOAT_COMPUTE


@dataclass(frozen=True)
class LoopItem:
    """One set of accumulators in a row loop."""
    kind: str  # "plain" | "online_softmax" | "welford"
    reductions: tuple[str, ...]  # plain: (r,); online_softmax: (max, sum); welford: (sum, squared-deviation sum)


def plan_row_loops(nodes: dict, kernel_nodes, rnumel: sympy.Expr) -> list[list[LoopItem]]:
    """Loops (in order), each a list of LoopItems evaluated in the same pass over the row."""
    in_kernel = set(kernel_nodes)
    reductions = [n for n in kernel_nodes if kind_of(nodes[n].op) == REDUCTION]
    red_set = set(reductions)
    deps = _Dependencies(nodes, in_kernel, red_set)
    paired: dict[str, LoopItem] = {}  # second reduction of a pair -> its item
    for name in reductions:
        if name in paired:
            continue
        for kind, match in (("online_softmax", _online_softmax_max), ("welford", _welford_sum)):
            first = match(nodes, in_kernel, name, rnumel)
            if first is not None and first in red_set and first not in paired and \
                    reductions.index(first) < reductions.index(name) and \
                    first not in {i.reductions[0] for i in paired.values()}:
                paired[name] = LoopItem(kind, (first, name))
                break
    firsts = {item.reductions[0]: item for item in paired.values()}
    loops: list[list[LoopItem]] = []
    in_loop: set[str] = set()
    for name in reductions:
        if name in paired:
            continue
        item = firsts.get(name, LoopItem("plain", (name,)))
        needs = set().union(*(deps.of(nodes[r].inputs[0]) for r in item.reductions)) - set(item.reductions)
        if not loops or needs & in_loop:
            loops.append([])
            in_loop = set()
        loops[-1].append(item)
        in_loop |= set(item.reductions)
    return loops


class _Dependencies:
    """The reductions of the kernel a value depends on (transitively, within the kernel)."""

    def __init__(self, nodes, in_kernel, reductions):
        self.nodes, self.in_kernel, self.reductions = nodes, in_kernel, reductions
        self.memo: dict[str, frozenset] = {}

    def of(self, name: str) -> frozenset:
        if name in self.memo:
            return self.memo[name]
        out: set[str] = set()
        stack, seen = [name], set()
        while stack:
            n = stack.pop()
            if n in seen or n not in self.in_kernel:
                continue
            seen.add(n)
            if n in self.reductions:
                out.add(n)
                continue
            stack.extend(self.nodes[n].inputs)
        self.memo[name] = frozenset(out)
        return self.memo[name]


def _through_views(nodes, in_kernel, name: str) -> str:
    while name in in_kernel and kind_of(nodes[name].op) == VIEW:
        name = nodes[name].inputs[0]
    return name


def _node(nodes, in_kernel, name):
    return nodes[name] if name in in_kernel else None


def _online_softmax_max(nodes, in_kernel, name, rnumel) -> str | None:
    """For `sum(exp(a - max(a)))`: the max reduction's name."""
    total = nodes[name]
    if total.op != "sum" or total.type.dtype not in FLOAT_COMPUTE:
        return None
    exp = _node(nodes, in_kernel, total.inputs[0])
    if exp is None or exp.op != "exp":
        return None
    sub = _node(nodes, in_kernel, exp.inputs[0])
    if sub is None or sub.op != "sub":
        return None
    peak = _node(nodes, in_kernel, _through_views(nodes, in_kernel, sub.inputs[1]))
    if peak is None or peak.op != "max" or peak.inputs[0] != sub.inputs[0] or peak.type.dtype != total.type.dtype:
        return None
    return peak.name


def _welford_sum(nodes, in_kernel, name, rnumel) -> str | None:
    """For `sum((a - sum(a) / n) ** 2)` with n the row length: the first sum's name."""
    total = nodes[name]
    if total.op != "sum" or total.type.dtype not in FLOAT_COMPUTE:
        return None
    sq = _node(nodes, in_kernel, total.inputs[0])
    if sq is None or not _is_square(nodes, sq):
        return None
    sub = _node(nodes, in_kernel, sq.inputs[0])
    if sub is None or sub.op != "sub":
        return None
    mean = _node(nodes, in_kernel, _through_views(nodes, in_kernel, sub.inputs[1]))
    if mean is None or mean.op != "div":
        return None
    first = _node(nodes, in_kernel, _through_views(nodes, in_kernel, mean.inputs[0]))
    count = nodes.get(_through_views(nodes, in_kernel, mean.inputs[1]))
    if first is None or first.op != "sum" or first.inputs[0] != sub.inputs[0] or \
            first.type.dtype != total.type.dtype or not _is_count(count, rnumel):
        return None
    return first.name


def _is_square(nodes, node) -> bool:
    if node.op == "mul":
        return node.inputs[0] == node.inputs[1]
    if node.op == "square":
        return True
    if node.op == "pow":
        exponent = nodes.get(node.inputs[1])
        return exponent is not None and exponent.op == "full" and exponent.attr("value") == 2
    return False


def _is_count(node, rnumel) -> bool:
    if node is None or node.op != "full":
        return False
    value = node.attr("value")
    if isinstance(value, Size):
        return sympy.expand(value.value - rnumel) == 0
    return isinstance(value, int | float) and not isinstance(value, bool) and rnumel.is_Integer \
        and value == int(rnumel)

"""Legality of scan kernels (docs/IR.md, "Scans"); legality.py calls these.

A scan kernel walks rows along the scan dim, like a reduction kernel, but every element of
the row gets its own result, in order. Its group has domain = the scan's shape and
reduce_dims = (dim,); it holds one `scan`, plus pointwise nodes over the domain: a
*prologue* computing the scan's input at each element, an *epilogue* reading the scan at
its own index. Everything it stores has the domain's shape (the row level).
"""

from __future__ import annotations

from pipec_ir.ops import SCAN_OPS

from .analysis import GraphAnalysis, same_shape, shape_str



def scan_domain(an: GraphAnalysis, name: str) -> tuple[tuple, tuple[int, ...]]:
    """(domain, reduce_dims) of the group a scan node starts in."""
    return an.shape(name), (int(an.nodes[name].attr("dim")),)


def scan_merge_reason(first, second) -> str | None:
    """Why groups `first` and `second` (at least one a scan) cannot be one kernel, or None."""
    if first.kind == "scan" and second.kind == "scan":
        return "a scan kernel holds one scan"
    other = second if first.kind == "scan" else first
    if other.kind != "pointwise":
        return f"a scan kernel fuses only pointwise ops, not a {other.kind} (it walks its rows in scan order)"
    return None


def scan_group_reason(an: GraphAnalysis, group, ordered) -> str | None:
    """A scan kernel holds exactly one scan over its domain; no other kernel holds one."""
    scans = [n for n in ordered if an.nodes[n].op in SCAN_OPS]
    if group.kind != "scan":
        return f"{scans[0]} is a scan in a {group.kind} kernel" if scans else None
    if len(scans) != 1:
        return f"a scan kernel holds one scan, not {len(scans)} ({', '.join(scans)})"
    (scan,) = scans
    if not same_shape(an.shape(scan), group.domain):
        return f"scan {scan} has shape {shape_str(an.shape(scan))}, not the kernel's domain {shape_str(group.domain)}"
    if (int(an.nodes[scan].attr("dim")),) != tuple(group.reduce_dims):
        return f"scan {scan} runs along dim {an.nodes[scan].attr('dim')}, the kernel along {tuple(group.reduce_dims)}"
    return None


def scan_read_reason(name: str, index: str, reader: str, own: str) -> str:
    return (f"{reader} reads scan {name} at another index than its own (index {index}, own {own}): "
            "a scan kernel has each result only where its row walk computes it")

"""Common subexpression elimination of a joint graph, before the min-cut partition.

torch's min-cut partition runs its own CSE (`torch._functorch.compile_utils.fx_graph_cse`), and
that function imports `torch._inductor.pattern_matcher` for two helpers of a few lines. The
import brings in all of Inductor's lowering: 0.5 s of every cold compile on a 2-core CPU
(docs/performance.md, "Session 25"), for a compiler that lowers nothing through Inductor. So the
partition runs this pass and calls min-cut with `functorch.config.cse` off.

The rules are torch's, so the partition sees the same graph (a test compares the two):
- placeholders, outputs, attributes, random ops, `aten.empty`, nodes sharing storage with an
  output and nodes defining an unbacked symbol are never merged;
- two calls merge when their target and arguments (after earlier merges) are equal, argument
  types included (`1` is not `1.0`), and no mutating op runs between them.
"""
from __future__ import annotations

import re

import sympy
import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._pytree import tree_flatten

from .fx_edit import draws_random

try:  # a functionalized mutation: its schema says it mutates, but it returns new values
    from torch._higher_order_ops.auto_functionalize import AutoFunctionalized
except ImportError:  # pragma: no cover - every supported torch has it
    AutoFunctionalized = ()

aten = torch.ops.aten

_RANDOM = frozenset({
    aten.dropout, aten._fused_dropout, aten._standard_gamma, aten.bernoulli, aten.multinomial,
    aten.native_dropout, aten.normal, aten.poisson, aten.binomial, aten.rrelu, aten.rand_like,
    aten.rand, aten.randint, aten.randn, aten.randperm,
})

# A Python callable mutates when its name says so: `add_`, `x_.y`, `set_...`, `__enter__`-style.
_MUTATING_NAME = re.compile(r"(?<!_)(_$|_[.]|(\b|_)(set|enter|exit|seed)(\b|_))(?!_)")
# An inductor op whose schema does not say it mutates, though it does.
_SCHEMA_EXCEPTIONS = ("resize_storage_bytes_",)


def _packet(node: fx.Node):
    return getattr(node.target, "overloadpacket", node.target)


def _mutates(node: fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        if target.namespace != "inductor" or target.overloadpacket.__name__ not in _SCHEMA_EXCEPTIONS:
            return target._schema.is_mutable
    elif isinstance(target, AutoFunctionalized):
        return False
    if node.op == "call_function" and _MUTATING_NAME.search(target.__name__):
        return True
    if node.op == "call_method" and _MUTATING_NAME.search(target):
        return True
    return node.kwargs.get("out") is not None


def _storage(node: fx.Node):
    """The storage of a node's tensor value, or None where it has none to compare."""
    value = node.meta.get("val")
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return StorageWeakRef(value.untyped_storage())
    except NotImplementedError:
        return None


def _never_merged(node: fx.Node, output_storages: set) -> bool:
    if node.op in ("placeholder", "output", "get_attr"):
        return True
    if _packet(node) in _RANDOM or draws_random(node) or _packet(node) is aten.empty:
        return True  # torch's list of random ops, and every op tagged as one (two draws are two)
    storage = _storage(node)
    if storage is not None and storage in output_storages:
        return True  # eager returns separate tensors here, even when they were computed alike
    value = node.meta.get("val")
    # a merged definition of an unbacked symbol would leave its users' metadata naming the other
    return isinstance(value, sympy.Symbol) and bool(free_unbacked_symbols(value))


def joint_graph_cse(graph: fx.Graph) -> fx.Graph:
    """A copy of `graph` in which each repeated computation is made once."""
    output = next(iter(reversed(graph.nodes)))
    assert output.op == "output", f"a graph ends with its output, not {output.op}"
    output_storages = {s for s in map(_storage, output.all_input_nodes) if s is not None}

    new_graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    seen: dict[tuple, tuple[fx.Node, tuple, int]] = {}  # key -> (new node, exact token, region)
    region = 0

    def substitute(values):
        flat, spec = tree_flatten(values)
        flat = [env.get(v, v) if isinstance(v, fx.Node) else
                v.node if isinstance(v, (torch.SymBool, torch.SymInt, torch.SymFloat)) else v
                for v in flat]
        return tuple(flat), spec

    for node in graph.nodes:
        if _mutates(node):
            region += 1
        if _never_merged(node, output_storages):
            env[node] = new_graph.node_copy(node, env.__getitem__)
            continue
        args, args_spec = substitute(node.args)
        kwargs, kwargs_spec = substitute(node.kwargs)
        # the types are part of the key: hash((x, 1.0)) == hash((x, 1)), but the ops differ
        key = (node.target, hash((tuple((a, type(a)) for a in args),
                                  tuple((a, type(a)) for a in kwargs))))
        token = (node.target, args, args_spec, kwargs, kwargs_spec)
        earlier = seen.get(key)
        if earlier is not None and earlier[1] == token and earlier[2] == region:
            env[node] = earlier[0]
            continue
        env[node] = new_graph.node_copy(node, env.__getitem__)
        if earlier is None or earlier[1] == token:
            # after a mutation, later duplicates are replaced by this node, not the earlier one
            seen[key] = (env[node], token, region)
    return new_graph

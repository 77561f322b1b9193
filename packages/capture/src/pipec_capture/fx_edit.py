"""Small edits of fx graphs that capture's rewrite passes share (sink_gathers.py,
follow_layouts.py, fold_gelu.py, attention_layouts.py, complex_pairs.py, conv_bias.py,
conv_layouts.py, pool_layouts.py, vocab_padding.py, mask_writes.py): a new call with its fake value, a node replaced, the dead
code dropped after a pass, and Dynamo's example values for the nodes a pass adds to its graph."""

from __future__ import annotations

import operator

import torch

TO_NCHW = (0, 3, 1, 2)  # permute(nhwc, TO_NCHW): the NCHW view of NHWC storage
TO_NHWC = (0, 2, 3, 1)  # its inverse


def replace_node(graph: torch.fx.Graph, node: torch.fx.Node, new: torch.fx.Node, keep_meta: bool = False) -> None:
    """Every use of `node` reads `new` instead, and `node` goes (what only it read is dead now:
    `recompiled_if` drops it). `keep_meta`: `new` takes `node`'s meta (its source location, say)
    but for its own fake value."""
    if keep_meta:
        new.meta.update({k: v for k, v in node.meta.items() if k != "val"})
    node.replace_all_uses_with(new)
    graph.erase_node(node)


def mutates(node: torch.fx.Node) -> bool:
    """Whether `node` writes memory that something else reads: torch's own impurity test, plus
    what it misses in a Dynamo graph, which is not functionalized yet: an in-place method
    (`key[..., :4].copy_(k_nope)` is a `call_method copy_` whose result nobody reads), an in-place
    function (`torch.Tensor.add_`, `aten.index_copy_`), `x[i] = y` (operator.setitem), functorch's
    state (a vmap's nesting level, which Dynamo records as calls) and a submodule call."""
    if node.is_impure() or node.op == "call_module":
        return True
    target = node.target
    if node.op == "call_method":
        return isinstance(target, str) and target.endswith("_") and not target.endswith("__")
    if node.op != "call_function":
        return False
    if target is operator.setitem:
        return True
    if (getattr(target, "__module__", None) or "").startswith(("torch._functorch", "torch._C._functorch")):
        return True  # vmap's nesting level: `_vmap_decrement_nesting` has no users, yet undoes the increment
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.is_mutable
    name = getattr(target, "__name__", "")
    return name.endswith("_") and not name.endswith("__")


def draws_random(node: torch.fx.Node) -> bool:
    """Whether `node` is an ATen op drawing from torch's generator (its `nondeterministic_seeded`
    tag): two such calls are two draws, however alike, and their order is eager's."""
    target = node.target
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.nondeterministic_seeded in target.tags


def call_arguments(schema, args, kwargs) -> dict:
    """{argument name: value} of one call of an ATen op with `schema`: positional, then keyword,
    then the schema's default; an argument with none of the three is left out."""
    values = {}
    for i, arg in enumerate(schema.arguments):
        if i < len(args):
            values[arg.name] = args[i]
        elif arg.name in kwargs:
            values[arg.name] = kwargs[arg.name]
        elif arg.has_default_value():
            values[arg.name] = arg.default_value
    return values


def drop_dead_code(graph: torch.fx.Graph) -> bool:
    """graph.eliminate_dead_code() that keeps every node which `mutates`: FX's own test alone
    dropped a Dynamo graph's in-place copies into a fresh tensor (DeepSeek-V3's key, built by
    `new_empty` and two slice `copy_`s, reached attention uninitialized). The subgraphs the graph
    calls (a higher-order op's bodies: an autograd.Function's forward and backward) get the same
    test: FX recurses into them with its own, which dropped PhiMoE's router backward's
    `scatter_add_` (its result unused), so every gradient before the router was wrong."""
    removed = False
    for node in reversed(graph.nodes):
        if not node.users and not mutates(node):
            graph.erase_node(node)
            removed = True
    owner = graph.owning_module
    if owner is not None:
        called = {node.target for node in graph.find_nodes(op="get_attr")}
        for name, child in owner.named_children():
            if name in called and isinstance(child, torch.fx.GraphModule) and drop_dead_code(child.graph):
                child.recompile()
                removed = True
    return removed


def recompiled_if(gm: torch.fx.GraphModule, rewritten: int) -> int:
    """After a pass's `rewritten` rewrites of `gm`: drop dead nodes and recompile, when there were
    any; returns `rewritten`."""
    if rewritten:
        drop_dead_code(gm.graph)
        gm.recompile()
    return rewritten


def meta_val(node):
    """The fake tensor (or value) the trace recorded for `node`; None for a non-node."""
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def call_node(graph: torch.fx.Graph, target, args, kwargs):
    """A new call of `target` with its meta value computed on the graph's fake tensors (node
    arguments anywhere in `args` and `kwargs`, lists of them too: a `cat`'s parts)."""
    from torch.fx.node import map_arg
    from torch.utils._pytree import tree_leaves

    new = graph.call_function(target, tuple(args), dict(kwargs))
    vals, kwvals = map_arg((tuple(args), dict(kwargs)), meta_val)
    mode = next((v.fake_mode for v in tree_leaves((vals, kwvals)) if hasattr(v, "fake_mode")), None)
    if mode is not None:
        with mode:
            new.meta["val"] = target(*vals, **kwvals)
    else:
        new.meta["val"] = target(*vals, **kwvals)
    return new


def stored_permuted(graph: torch.fx.Graph, node: torch.fx.Node, order) -> torch.fx.Node:
    """`node`'s values stored with its dims in `order`, outermost first, and viewed back in its
    own dim order: `permute(clone(permute(node, order)), inverse)`. The clone is one kernel's
    store in that order; the pointwise chain computing `node` fuses into it."""
    inverse = [list(order).index(d) for d in range(len(order))]
    stored = call_node(graph, torch.ops.aten.permute.default, (node, list(order)), {})
    stored = call_node(graph, torch.ops.aten.clone.default, (stored,), {"memory_format": torch.contiguous_format})
    return call_node(graph, torch.ops.aten.permute.default, (stored, inverse), {})


def nhwc_storage(graph: torch.fx.Graph, node: torch.fx.Node) -> torch.fx.Node:
    """The NHWC tensor whose NCHW view channels-last `node` is: the input of its permute, or a
    new `permute(node, TO_NHWC)` (a result stored channels-last, which that permute makes
    contiguous)."""
    if is_permute(node, TO_NCHW):
        return node.args[0]
    return call_node(graph, torch.ops.aten.permute.default, (node, list(TO_NHWC)), {})


def is_permute(node, order) -> bool:
    """Is `node` `permute(x, order)` (dims given negative or not)?"""
    if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is torch.ops.aten.permute.default):
        return False
    dims = node.args[1]
    return len(dims) == len(order) and tuple(d % len(order) for d in dims) == tuple(order)


def example_value(node):
    """The value Dynamo recorded for `node` of its graph (`example_value`); None for a non-node."""
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def trace_examples(graph: torch.fx.Graph, changed: list[torch.fx.Node], fake_mode) -> None:
    """The `example_value` of each new or changed node of a Dynamo graph, run in graph order on
    its inputs' (fake) values, as Dynamo records them: AOTAutograd's cache takes a method called
    on a node without one for a call it cannot vouch for, and stores nothing (pipec/aot_cache.py).
    An in-place method's value is its first argument's (it returns it), not run on the shared
    fake value. Where a value cannot be made, the nodes keep what they had: the graph is still
    right, and only AOTAutograd's cache passes it over."""
    if fake_mode is None:
        return
    before = {node: node.meta.get("example_value") for node in changed}
    try:
        for node in graph.nodes:
            if node not in before:
                continue
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), example_value)
            if node.op == "call_method" and node.target.endswith("_") and not node.target.endswith("__"):
                node.meta["example_value"] = args[0]
                continue
            with fake_mode:
                if node.op == "call_method":
                    value = getattr(args[0], node.target)(*args[1:], **kwargs)
                else:
                    value = node.target(*args, **kwargs)
            node.meta["example_value"] = value
    except Exception:  # noqa: BLE001 - see the docstring
        for node, value in before.items():
            if value is None:
                node.meta.pop("example_value", None)
            else:
                node.meta["example_value"] = value

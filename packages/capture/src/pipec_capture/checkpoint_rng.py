"""Activation checkpointing's replayed draws, where nothing is drawn.

Under activation checkpointing (`torch.utils.checkpoint`, transformers'
`gradient_checkpointing_enable()`) the backward recomputes the forward's values. An op tagged
random (ATen's `nondeterministic_seeded`) must then draw the same numbers twice, so AOTAutograd's
partitioner wraps it: the forward runs `run_and_save_rng_state(op, *args)`, which saves torch's
generator state as an extra saved tensor, and the backward runs
`run_with_rng_state(state, op, *args)`. These higher-order ops are not ATen, so capture refused
the graph and the whole step ran eagerly.

The tag is the op's, not the call's: SDPA's attention kernels carry it because they can apply
dropout, and every transformers decoder with `attention_dropout=0` (Llama, Mistral, Qwen,
Gemma...) calls them with `dropout_p=0`, where they draw nothing. Such a call is unwrapped here
into the op itself, in both graphs, and the generator state it saved is dropped from the saved
values. A call that does draw (dropout above 0) is left wrapped: capture then names the op in its
error, and the graph runs eagerly with that warning, since replaying torch's generator from a
compiled graph is not supported.
"""

from __future__ import annotations

import operator

import torch

from .fx_edit import call_arguments

try:  # imported here, not read as an attribute of torch._prims, which need not have loaded it
    from torch._prims import rng_prims as _rng_prims
except ImportError:  # pragma: no cover - every supported torch has it
    _rng_prims = None
_SAVE = getattr(_rng_prims, "run_and_save_rng_state", None)
_REPLAY = getattr(_rng_prims, "run_with_rng_state", None)


def draws_nothing(op, args, kwargs) -> bool:
    """Whether this call of a random-tagged op draws no random numbers: an attention kernel
    with `dropout_p` 0, or a dropout that is off (`train` false or `p` 0)."""
    schema = getattr(op, "_schema", None)
    if schema is None:
        return False
    values = call_arguments(schema, args, kwargs)
    if "dropout_p" in values:
        return values["dropout_p"] == 0
    if "train" in values and "p" in values:
        return not values["train"] or values["p"] == 0
    return False


def unwrap_replayed_draws(forward: torch.fx.GraphModule, backward: torch.fx.GraphModule) -> int:
    """Unwrap every saved-and-replayed call of a partitioned pair that draws nothing (module
    docstring); returns how many were unwrapped. The k-th generator state among the forward's
    outputs is the k-th state placeholder of the backward (the partitioner adds both in one
    loop); where the two lists do not line up, nothing is changed."""
    if _SAVE is None or _REPLAY is None:
        return 0
    output = next(n for n in forward.graph.nodes if n.op == "output")
    outs = list(output.args[0])
    states = [o for o in outs if _state_of(o) is not None]
    replays = [n for n in backward.graph.nodes if n.op == "call_function" and n.target is _REPLAY]
    placeholders = [p for p in backward.graph.nodes if p.op == "placeholder"
                    and any(r.args[0] is p for r in replays)]
    if len(states) != len(placeholders):
        return 0
    unwrapped = []  # (state, its run_and_save_rng_state node), erased once the outputs drop them
    for state, placeholder in zip(states, placeholders):
        saving = _state_of(state)
        op, args, kwargs = saving.args[0], saving.args[1:], saving.kwargs
        users = list(placeholder.users)
        if not draws_nothing(op, args, kwargs) or outs.count(state) != 1 or state.users.keys() != {output}:
            continue
        if any(u.target is not _REPLAY or u.args[0] is not placeholder or u.args[1] is not op for u in users):
            continue
        _call_directly(forward.graph, saving, op, args, kwargs, result_of=_result_getitem(saving))
        for replay in users:
            _call_directly(backward.graph, replay, op, replay.args[2:], replay.kwargs)
            backward.graph.erase_node(replay)
        backward.graph.erase_node(placeholder)
        outs.remove(state)
        unwrapped.append((state, saving))
    if unwrapped:
        output.args = (tuple(outs),) + tuple(output.args[1:])
        for state, saving in unwrapped:
            forward.graph.erase_node(state)
            forward.graph.erase_node(saving)
        forward.recompile()
        backward.recompile()
    return len(unwrapped)


def _state_of(node):
    """The `run_and_save_rng_state` node whose saved state `node` is (`getitem(call, 0)`), or None."""
    if (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is operator.getitem
            and node.args[1] == 0 and isinstance(node.args[0], torch.fx.Node)
            and node.args[0].target is _SAVE):
        return node.args[0]
    return None


def _result_getitem(saving):
    return next((u for u in saving.users if u.target is operator.getitem and u.args[1] == 1), None)


def _call_directly(graph, wrapper, op, args, kwargs, result_of=None):
    """Put `op(*args, **kwargs)` where `wrapper` computed it; `result_of` is the node that read
    the op's result out of the wrapper (the forward's `getitem(wrapper, 1)`), else the wrapper
    itself is the result (the backward's replay)."""
    result = result_of if result_of is not None else wrapper
    with graph.inserting_before(wrapper):
        call = graph.call_function(op, tuple(args), dict(kwargs))
    call.meta = dict(result.meta)
    result.replace_all_uses_with(call)
    if result is not wrapper:
        graph.erase_node(result)


def replay_refusal(node: torch.fx.Node) -> str | None:
    """Capture's error for a wrapped call left after `unwrap_replayed_draws` (one that draws), or
    None for any other node."""
    if node.target is _SAVE:
        op = node.args[0]
    elif node.target is _REPLAY:
        op = node.args[1]
    else:
        return None
    return (f"{op} draws random numbers inside an activation-checkpointed region, and the backward "
            "must replay them from torch's generator, which a compiled graph cannot; run that "
            "region without dropout, or without checkpointing, to compile it")

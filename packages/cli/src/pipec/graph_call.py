"""How the runtime's callable is called for one AOTAutograd graph: the layers between the two.

AOTAutograd calls a compiled graph with its own argument list and expects its own outputs;
a Program takes and returns tensors only. Each layer here bridges one difference:

* `TensorsOnly`: size arguments (dynamic shapes) out of the call, tensors in;
* `graph_devices.OnGraphDevices`: inputs and outputs on the devices the graph gives them;
* `SizeOutputs`: the sizes (and checks of unbacked sizes) a forward graph returns for its backward;
* `ObjectOutputs`: opaque objects (a DeviceMesh) a graph returns as it got them;
* `constants.BoundConstants`: the graph's own tensor constants, bound where it takes them.

Each layer is a small class holding only data and the callable it wraps (`inner`), not a
closure, so that a chain of them pickles with the runtime's callable left out
(aot_cache.py): a graph served from AOTAutograd's cache gets the same layers around a Program
loaded again. A layer with something that does not pickle (an unbacked size recomputed from
the graph's nodes) keeps its graph out of that cache and works as before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .errors import PipecError


class Layer:
    """A callable around `inner` (the runtime's callable, or another layer)."""

    inner: Callable

    def __call__(self, args):
        raise NotImplementedError

    @property
    def pipec_runtime(self):
        """The runtime's own callable under every layer."""
        return getattr(self.inner, "pipec_runtime", self.inner)


def tensors_only(fn, example_inputs, device=None):
    """A graph with dynamic shapes also takes its size symbols as (int) arguments; the
    Program's inputs are the tensors (the runtime binds sizes from their shapes), then, for each
    int argument whose size no tensor argument has as a dimension, a 1-D int8 tensor of that
    length, never read (docs/IR.md, "Graph": a backward graph takes the reduced dim of
    `x.sum(1)` as an int). Without tensor arguments those are made on `device` (the graph's,
    graph_devices.py), which the runtime then runs on."""
    import torch

    keep = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)]
    if len(keep) == len(example_inputs):
        return fn
    return TensorsOnly(fn, keep, _size_only_positions(example_inputs), device)


class TensorsOnly(Layer):
    def __init__(self, inner, keep: list[int], sizes: list[int], device) -> None:
        self.inner, self.keep, self.sizes, self.device = inner, keep, sizes, device

    def _tensors_of(self, args) -> list:
        import torch

        tensors = [args[i] for i in self.keep]
        if self.sizes:
            where = tensors[0].device if tensors else self.device
            tensors += [torch.empty(int(args[j]), dtype=torch.int8, device=where) for j in self.sizes]
        return tensors

    def __call__(self, args):
        return self.inner(self._tensors_of(args))

    @property
    def call_owned(self):
        """A backward with sizes among its inputs still frees what it has read (the runtime's
        `call_owned`, where it has one)."""
        owned = self.inner.call_owned  # AttributeError: the runtime cannot take the list over

        def call_owned(args):
            tensors = self._tensors_of(args)
            args.clear()
            return owned(tensors)
        return call_owned


def _size_only_positions(example_inputs) -> list[int]:
    """Positions of the SymInt arguments that carry a size no tensor argument has as a dimension
    (each symbol once): the capture stage's `size_only_placeholders` rule."""
    import torch

    dims = {d.node.expr for x in example_inputs if isinstance(x, torch.Tensor)
            for d in x.shape if isinstance(d, torch.SymInt) and d.node.expr.is_Symbol}
    out = []
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol and x.node.expr not in dims:
            dims.add(x.node.expr)
            out.append(i)
    return out


def _graph_outputs(gm) -> tuple:
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    return out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)


def with_size_outputs(fn, gm, example_inputs, name: str = "graph"):
    """With dynamic shapes, AOTAutograd's forward graph also returns sizes (SymInts it saves
    for the backward graph) and, on torch 2.11, the checks of unbacked ones (SymBools such as
    `u0 >= 0`, which the backward asserts). A Program returns None for a non-tensor output, so
    each such output is computed here from the sizes of this call's inputs."""
    import torch

    vals = [o.meta.get("val") if isinstance(o, torch.fx.Node) else o for o in _graph_outputs(gm)]
    sizes = {i: v for i, v in enumerate(vals) if isinstance(v, (int, bool, torch.SymInt, torch.SymBool))}
    if not sizes:
        return fn
    sources = _symbol_sources(example_inputs)
    recomputed = _unbacked_sources(gm, sources)
    size_fns = {}
    for i, v in sizes.items():
        expr = v.node.expr if isinstance(v, (torch.SymInt, torch.SymBool)) else v
        missing = [str(s) for s in getattr(expr, "free_symbols", ()) if s not in sources and s not in recomputed]
        if missing:
            raise PipecError(f"graph {name} returns the size {expr}, but no input has size {', '.join(missing)}",
                             stage="runtime", graph=name)
        size_fns[i] = size_function(expr, sources, recomputed, truth=isinstance(v, (bool, torch.SymBool)))
    return SizeOutputs(fn, size_fns)


class SizeOutputs(Layer):
    def __init__(self, inner, size_fns: dict[int, Callable]) -> None:
        self.inner, self.size_fns = inner, size_fns

    def __call__(self, args):
        out = list(self.inner(args))
        for i, size_of in self.size_fns.items():
            out[i] = size_of(args)
        return out


def with_object_outputs(fn, gm, example_inputs):
    """Under tensor parallel, AOTAutograd's graphs take DTensor's DeviceMesh (an opaque object)
    as inputs and return them unchanged (the forward saves the mesh for the backward graph).
    The Program has no such input and returns None there (capture's `opaque_input`): each such
    output is the object this call passed."""
    import torch

    placeholders = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    plain = (torch.Tensor, int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool, type(None))
    passed = {k: placeholders[o] for k, o in enumerate(_graph_outputs(gm))
              if o in placeholders and not isinstance(example_inputs[placeholders[o]], plain)}
    return ObjectOutputs(fn, passed) if passed else fn


class ObjectOutputs(Layer):
    def __init__(self, inner, passed: dict[int, int]) -> None:
        self.inner, self.passed = inner, passed

    def __call__(self, args):
        out = list(self.inner(args))
        for k, i in self.passed.items():
            out[k] = args[i]
        return out


def _symbol_sources(example_inputs) -> dict:
    """Size symbol -> (input index, dim) where an input tensor has it as a size, or (input index, None)
    where an int input is that symbol."""
    import torch

    sources: dict = {}
    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol:
            sources.setdefault(x.node.expr, (i, None))
        elif isinstance(x, torch.Tensor):
            for d, size in enumerate(x.shape):
                if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol:
                    sources.setdefault(size.node.expr, (i, d))
    return sources


def size_function(expr, sources: dict, recomputed: dict | None = None, truth: bool = False):
    """`f(args) -> int`: the size `expr` for a call with `args`, its symbols read off the inputs
    (`sources`) or recomputed from them (`recomputed`: symbol -> f(args)); with `truth`, `expr`
    is a condition on sizes and gives a bool."""
    if not getattr(expr, "free_symbols", None):
        return SizeOf((bool if truth else int)(expr), {}, {}, truth)
    used = {s: sources[s] for s in expr.free_symbols if s in sources}
    derived = {s: (recomputed or {})[s] for s in expr.free_symbols if s not in sources}
    return SizeOf(expr, used, derived, truth)


class SizeOf:
    """A size (or a condition on sizes, `truth`) of one call: `expr` with its symbols read off
    the call's inputs (`used`: symbol -> (input, dim or None)) or recomputed (`derived`)."""

    def __init__(self, expr, used: dict, derived: dict[Any, Callable], truth: bool) -> None:
        self.expr, self.used, self.derived, self.truth = expr, used, derived, truth

    def __call__(self, args):
        convert = bool if self.truth else int
        if not self.used and not self.derived:
            return convert(self.expr)
        values = {s: (args[i] if d is None else args[i].shape[d]) for s, (i, d) in self.used.items()}
        values.update({s: f(args) for s, f in self.derived.items()})
        return convert(self.expr.xreplace({s: int(v) for s, v in values.items()}))


def _unbacked_sources(gm, sources: dict) -> dict:
    """Unbacked symbol -> `f(args) -> int`, for each one a node of `gm` binds from its result's
    sizes while its own inputs' sizes are known (torch 2.11's fake slice leaves the length of
    `x[:, -3:]` on a dynamic dim unbacked, and AOTAutograd returns it for the backward): the
    node runs again on meta tensors of this call's input sizes and the size is read off."""
    import torch

    found = {}
    for node in gm.graph.nodes:
        for sym, path in (node.meta.get("unbacked_bindings") or {}).items():
            fn = _rerun_on_meta(node, path, sources)
            if fn is not None:
                found[sym] = fn
                out = node.meta.get("val")
                for key in path:  # the symbol the result's type names, after the shape env's replacements
                    out = key.get(out)
                if isinstance(out, torch.SymInt) and out.node.expr.is_Symbol:
                    found.setdefault(out.node.expr, fn)
    return found


def _rerun_on_meta(node, path, sources: dict):
    """`f(args) -> int` running `node` on meta tensors sized for the call and following `path`
    (its unbacked binding's key path) into the result; None where an input size is not known.
    A closure over the graph's node: a graph that needs one is not stored in AOTAutograd's cache."""
    import torch

    def size_fn(v):
        expr = v.node.expr if isinstance(v, torch.SymInt) else v
        if any(s not in sources for s in getattr(expr, "free_symbols", ())):
            raise KeyError(expr)
        return size_function(expr, sources)

    def plan(a):  # the argument as a function of the call's args
        val = a.meta.get("val") if isinstance(a, torch.fx.Node) else a
        if isinstance(val, torch.Tensor):
            dims, dtype = [size_fn(d) for d in val.shape], val.dtype
            return lambda args: torch.empty([d(args) for d in dims], dtype=dtype, device="meta")
        if isinstance(val, torch.SymInt):
            return size_fn(val)
        return lambda args: val

    try:
        args = [plan(a) for a in node.args]
        kwargs = {k: plan(v) for k, v in node.kwargs.items()}
    except KeyError:
        return None

    def value(args_now):
        out = node.target(*(a(args_now) for a in args), **{k: v(args_now) for k, v in kwargs.items()})
        for key in path:
            out = key.get(out)
        return int(out)

    return value


__all__ = ["Layer", "ObjectOutputs", "SizeOf", "SizeOutputs", "TensorsOnly", "size_function", "tensors_only",
           "with_object_outputs", "with_size_outputs"]

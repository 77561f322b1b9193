"""Extern calls: the `Lowerer`'s (lowerer.py) nodes for ops pipec generates no code for.

An op with no lowering-table row, a library call (table.LIBRARY_OPS), a custom op or a random op
left to torch becomes an `extern` node naming the ATen overload, its arguments stored as IR
attributes (tensors as `Ref`s). `with_effects`, AOTAutograd's ordering of an op with effects
(torch.linalg.inv's check of its factorization), becomes an extern of the op it wraps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import sympy
import torch
import torch.fx

import pipec_ir
from pipec_ir import Device, Dtype, Node, Ref, TensorType, make_attrs, size_attr
from pipec_ir.symbolic import expr_str

from .builder import GraphBuilder
from .checkpoint_rng import replay_refusal
from .dtypes import ir_dtype
from .errors import CaptureError
from .fx_edit import draws_random
from .table import extern_reason, op_name


@dataclass(frozen=True)
class MultiExtern:
    """The env value of a multi-result extern: fx getitem nodes become IR getitem nodes."""
    name: str
    results: tuple  # per result: TensorType or None (non-tensor result)


class ExternCall(NamedTuple):
    """An op call an extern node makes, where it is not the fx node's own (`with_effects`)."""
    op: Any
    args: tuple
    kwargs: dict
    val: Any


# AOTAutograd's wrapper of an op with effects (effect tokens order such calls)
WITH_EFFECTS = getattr(torch.ops.higher_order, "with_effects", None)
EFFECT_TOKENS = ("prims._make_token.default", "prims._sink_tokens.default")

_DEFAULT_LIKE = {torch.strided, torch.contiguous_format, torch.preserve_format}
_DROPPABLE_KWARGS = ("layout", "memory_format", "pin_memory")


def _strided_results(val) -> tuple[int, ...]:
    """The indices of an extern's tensor results that the trace made with other strides than
    row-major (attention's output and gradients: [batch, heads, seq, dim] laid out as [batch,
    seq, heads, dim]); () for none. A layout the trace cannot tell without a guard counts as
    row-major."""
    results = (val,) if isinstance(val, torch.Tensor) else tuple(val) if isinstance(val, (tuple, list)) else ()
    strided = []
    for k, r in enumerate(results):
        if not isinstance(r, torch.Tensor):
            continue
        try:
            contiguous = r.is_contiguous()
        except Exception:  # noqa: BLE001 - a layout decided by unbacked sizes: treated as row-major
            continue
        if contiguous is False:
            strided.append(k)
    return tuple(strided)


class ExternCalls(GraphBuilder):
    """The extern-making half of the `Lowerer` (which supplies `where`, `env` and `map_arg`)."""

    def result_of(self, value: MultiExtern, index: int, name: str) -> Ref:
        """An IR getitem node `name` taking result `index` of a multi-result extern."""
        t = value.results[index]
        self.nodes.append(Node(name, "getitem", (value.name,), t, make_attrs(index=index)))
        self.types[name] = t
        return Ref(name)

    def effectful_call(self, node: torch.fx.Node) -> tuple:
        """`with_effects(token, op, *args)`: how AOTAutograd keeps an op with effects in order,
        e.g. `_linalg_check_errors` after torch.linalg.inv / cholesky / solve, which raises
        eager's LinAlgError when the factorization's `info` says the matrix is singular. The op
        becomes an extern of its own (externs keep graph order and are never dropped); the token
        passes through unchanged: it orders calls and holds no data. Its value: (token, results)."""
        token, op, *args = node.args
        val = node.meta.get("val")
        if not isinstance(op, torch._ops.OpOverload) or not isinstance(val, (tuple, list)):
            raise CaptureError(f"{self.where(node)}: with_effects around {op!r}, not an ATen op")
        returns = len(op._schema.returns)
        inner_val = None if returns == 0 else val[1] if returns == 1 else tuple(val[1:])
        target = op_name(op)
        result = self.extern(node, target, extern_reason(target),
                             ExternCall(op, tuple(args), dict(node.kwargs), inner_val))
        if isinstance(result, MultiExtern):  # one IR getitem per tensor result; no results: None
            results = tuple(None if t is None else self.result_of(result, i, self.fresh(f"{result.name}_{i}"))
                            for i, t in enumerate(result.results))
            return (self.map_arg(token), *(results or (None,)))
        return self.map_arg(token), result

    def extern(self, node: torch.fx.Node, target: str, reason: str, call: ExternCall | None = None):
        """An extern node calling `node`'s op, or `call`'s (an op wrapped by a higher-order op)."""
        if replay_refusal(node):
            raise CaptureError(f"{self.where(node)}: {replay_refusal(node)}")
        op, node_args, node_kwargs, val = call or (node.target, node.args, node.kwargs, node.meta.get("val"))
        if isinstance(op, torch._ops.HigherOrderOperator):
            raise CaptureError(
                f"{self.where(node)}: higher-order op {node.target.name()} (control flow such as torch.cond "
                "or while_loop, or a call of a traced body) has no pipec lowering; pipec compiles "
                "graphs of ATen ops")
        if self.fullgraph and reason not in pipec_ir.INTENDED_EXTERN_REASONS:
            raise CaptureError(
                f"{self.where(node)}: {target} has no pipec lowering (fullgraph=True); "
                f"add a row for {target!r} to pipec_capture.LOWERINGS, or compile with fullgraph=False "
                "to run it through PyTorch as an extern call")
        if not isinstance(op, torch._ops.OpOverload):
            raise CaptureError(
                f"{self.where(node)}: call to {target} is not an ATen op; pipec captures ATen graphs "
                "(through AOTAutograd or torch.export)")
        refs: list[str] = []
        args = tuple(self.extern_value(a, refs, node) for a in node_args)
        kwargs = []
        for k, v in node_kwargs.items():
            if k in _DROPPABLE_KWARGS and (v is None or v is False or v in _DEFAULT_LIKE):
                continue
            kwargs.append((k, self.extern_value(v, refs, node)))
        inputs = tuple(Ref(r) for r in refs)
        attrs = dict(target=target, args=args, kwargs=tuple(kwargs), reason=reason)
        if draws_random(node):
            attrs["seeded"] = True  # runs in graph order (docs/IR.md)
        strided = _strided_results(val)
        if strided:  # a hint for fusion (docs/IR.md, "extern"): these results are not row-major
            attrs["strided"] = strided
        if isinstance(val, torch.Tensor):
            t = self.tensor_type(val, self.where(node))
            name = self.own_name(node)
            self.nodes.append(Node(name, "extern", tuple(r.name for r in inputs), t, make_attrs(**attrs)))
            self.types[name] = t
            return Ref(name)
        if val is None and not op._schema.returns:
            # a check with no result (aten._assert_async.msg: one_hot's "index in range"): an
            # extern of no results, kept as every extern is, so the check still runs
            val = ()
        if isinstance(val, (tuple, list)) and (not val or any(isinstance(v, torch.Tensor) for v in val)):
            results = tuple(self.tensor_type(v, self.where(node)) if isinstance(v, torch.Tensor) else None
                            for v in val)
            attrs["results"] = tuple(
                None if t is None else (tuple(expr_str(s) for s in t.shape), t.dtype) for t in results)
            name = self.own_name(node)
            t = TensorType((), "tuple")
            self.nodes.append(Node(name, "extern", tuple(r.name for r in inputs), t, make_attrs(**attrs)))
            return MultiExtern(name, results)
        raise CaptureError(
            f"{self.where(node)}: {target} does not return tensors (it returns "
            f"{type(val).__name__}); pipec cannot compile ops with non-tensor outputs - move it out of "
            "the compiled region")

    def extern_value(self, a, refs: list[str], node):
        if isinstance(a, torch.fx.Node):
            v = self.env.get(a)
            if isinstance(v, Ref):
                if v.name not in refs:
                    refs.append(v.name)
                return v
            if isinstance(v, (tuple, list)):
                return tuple(self.extern_value_plain(x, refs, node) for x in v)
            return self.extern_value_plain(v, refs, node)
        if isinstance(a, (list, tuple)):
            return tuple(self.extern_value(x, refs, node) for x in a)
        return self.extern_value_plain(a, refs, node)

    def extern_value_plain(self, a, refs, node):
        if isinstance(a, Ref):
            if a.name not in refs:
                refs.append(a.name)
            return a
        if a is None or isinstance(a, (bool, int, str)):
            return a
        if isinstance(a, float):
            return a
        if isinstance(a, torch.dtype):
            return Dtype(ir_dtype(a, self.where(node)))
        if isinstance(a, torch.device):
            return Device()
        if isinstance(a, (torch.layout, torch.memory_format)):
            if a in _DEFAULT_LIKE:
                return None
        if isinstance(a, (torch.SymInt, sympy.Expr)):
            return size_attr(self.symbols.size(a))  # a Size leaf when symbolic (docs/IR.md)
        if isinstance(a, (list, tuple)):
            return tuple(self.extern_value_plain(x, refs, node) for x in a)
        if isinstance(a, MultiExtern):
            raise CaptureError(f"{self.where(node)}: a multi-result value passed whole to an extern op")
        raise CaptureError(
            f"{self.where(node)}: argument {a!r} ({type(a).__name__}) cannot be stored in the IR; "
            "run this op outside the compiled region")

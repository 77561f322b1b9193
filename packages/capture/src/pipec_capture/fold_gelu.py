"""tanh-GELU written out as arithmetic becomes one `aten.gelu(x, approximate="tanh")`.

GPT-2, Phi, GPT-J, CodeGen and others use transformers' `NewGELUActivation` ("gelu_new"):
`0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * pow(x, 3))))`, eight ATen ops. As ops they
cost two ways:

- `pow` keeps the chain out of a matmul epilogue under the default policy (fusion's
  heuristics), so the MLP's first GEMM and its activation were two launches;
- even as one epilogue, no cuBLAS alternative applies it: cuBLASLt's bias + tanh-GELU epilogue
  (codegen's "library_act") is offered for a `gelu` op only.

As one `gelu` op, the GEMM writes the activation itself (cuBLASLt or the Triton template).
It is the same function: eager computes the chain op by op, each rounded to the tensor's dtype;
`gelu` rounds once, so half-precision results differ from eager's by rounding only.

The pass is an FX rewrite of the ATen graph, before lowering. It folds a chain only when its
intermediate values have no reader outside it (a training graph saves `tanh` and `0.5 * x` for
the backward: there the chain stays as it is, and nothing is computed twice).
"""

from __future__ import annotations

import math

import torch

from .fx_edit import recompiled_if, replace_node

aten = torch.ops.aten

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
CUBE_COEFFICIENT = 0.044715
CONSTANT_RTOL = 1e-6  # "0.7978845608" (a truncated sqrt(2/pi), as some models write it) matches


def fold_tanh_gelu(gm: torch.fx.GraphModule) -> int:
    """Replace every written-out tanh-GELU of `gm` by `aten.gelu`; returns how many."""
    folded = 0
    for node in list(gm.graph.nodes):
        match = _match(node)
        if match is None:
            continue
        x, chain = match
        if any(len(n.users) != 1 for n in chain if n is not node):
            continue  # an intermediate is read elsewhere (saved for a backward): keep the ops
        with gm.graph.inserting_before(node):
            gelu = gm.graph.call_function(aten.gelu.default, (x,), {"approximate": "tanh"})
        gelu.meta.update(node.meta)
        replace_node(gm.graph, node, gelu)
        folded += 1
    return recompiled_if(gm, folded)


def _match(out):
    """(x, the chain's nodes with `out` first) when `out` computes 0.5 * x * (1 + tanh(...)) as
    NewGELUActivation writes it; None otherwise. Operands of mul and add match in either order."""
    halves = _scaled(out, aten.mul.Tensor)
    if halves is None:
        return None
    for half, one_plus in (halves, halves[::-1]):
        x = _operand_times(half, 0.5)
        tanh = _operand_plus(one_plus, 1.0)
        if x is None or tanh is None or not _is(tanh, aten.tanh.default):
            continue
        inner = _operand_times(tanh.args[0], SQRT_2_OVER_PI)
        if inner is None or not _is(inner, aten.add.Tensor) or not _float_like(x):
            continue
        for x_again, cubed in (inner.args[:2], inner.args[1::-1]):
            cube = _operand_times(cubed, CUBE_COEFFICIENT) if x_again is x else None
            if cube is not None and _is_cube_of(cube, x):
                chain = [out, half, one_plus, tanh, tanh.args[0], inner, cubed, cube]
                return x, chain
    return None


def _is(node, target) -> bool:
    return isinstance(node, torch.fx.Node) and node.op == "call_function" and node.target is target


def _scaled(node, target):
    """(a, b) of a two-tensor `target` node (no alpha); None otherwise."""
    if not _is(node, target) or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    return (a, b) if isinstance(a, torch.fx.Node) and isinstance(b, torch.fx.Node) else None


def _close(value, want: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isclose(
        value, want, rel_tol=CONSTANT_RTOL)


def _operand_times(node, factor: float):
    """t when `node` is `t * factor` (either order); None otherwise."""
    if not _is(node, aten.mul.Tensor) or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    if isinstance(a, torch.fx.Node) and _close(b, factor):
        return a
    if isinstance(b, torch.fx.Node) and _close(a, factor):
        return b
    return None


def _operand_plus(node, term: float):
    """t when `node` is `t + term` (no alpha); None otherwise."""
    if not _is(node, aten.add.Tensor) or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    return a if isinstance(a, torch.fx.Node) and _close(b, term) else None


def _is_cube_of(node, x) -> bool:
    """`pow(x, 3)`, or `x * x * x` as an other spelling of it."""
    if _is(node, aten.pow.Tensor_Scalar) and node.args[0] is x and _close(node.args[1], 3.0):
        return True
    pair = _scaled(node, aten.mul.Tensor)
    if pair is None:
        return False
    square = next((p for p in pair if p is not x), None)
    squared = _scaled(square, aten.mul.Tensor) if square is not None else None
    return x in pair and squared is not None and squared == (x, x)


def _float_like(x) -> bool:
    val = x.meta.get("val")
    return isinstance(val, torch.Tensor) and val.dtype.is_floating_point

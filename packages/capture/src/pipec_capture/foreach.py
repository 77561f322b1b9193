"""ATen's `_foreach_*` ops, one call per list element.

An optimizer's step (`torch.optim` with `foreach=True`, the default on GPUs) is a handful of
`_foreach_*` ops over every parameter, gradient and state tensor; compiling it
(`pipec.compile(opt.step)`, as PyTorch's tutorials show for Inductor) made each of them an extern
call with a warning. torch has no decomposition of them (Inductor lowers them itself). Here each
becomes its per-tensor op for every element of its lists, so a parameter's whole update (AdamW's
lerp, addcmul, sqrt, div, add) is one pointwise chain that fusion makes one kernel, which reads
the parameter, its gradient and its state once and writes them once.

The per-element op is read off the overload's schema: a `Tensor[]` or `Scalar[]` argument gives
its i-th element, any other argument (a Scalar, a Tensor such as `add.Tensor`'s `other`, alpha)
goes to every element as it is. The few ops whose per-tensor name differs are in `_PER_ELEMENT`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .fx_edit import call_arguments

aten = torch.ops.aten
_PREFIX = "aten::_foreach_"


def _maximum_scalar(x, scalar):
    return torch.clamp_min(x, scalar)


def _minimum_scalar(x, scalar):
    return torch.clamp_max(x, scalar)


def _addcmul(x, tensor1, tensor2, value=1):
    return torch.addcmul(x, tensor1, tensor2, value=value)  # `value` is keyword-only there


def _addcdiv(x, tensor1, tensor2, value=1):
    return torch.addcdiv(x, tensor1, tensor2, value=value)


def _addcmul_tensor(x, tensor1, tensor2, scalar):
    """addcmul.Tensor: `scalars` holds one value per element in a tensor; torch.addcmul takes a
    Python number as `value`, which a traced tensor is not, so the value multiplies in."""
    return x + scalar.to(x.dtype) * tensor1 * tensor2


def _addcdiv_tensor(x, tensor1, tensor2, scalar):
    return x + scalar.to(x.dtype) * tensor1 / tensor2


# (base name, overload) -> per-tensor function, where it is not torch.<base name> with the same
# arguments; overload None matches every overload of the name.
_PER_ELEMENT: dict[tuple[str, str | None], Callable] = {
    ("maximum", "Scalar"): _maximum_scalar,
    ("maximum", "ScalarList"): _maximum_scalar,
    ("minimum", "Scalar"): _minimum_scalar,
    ("minimum", "ScalarList"): _minimum_scalar,
    ("addcmul", "Scalar"): _addcmul,
    ("addcmul", "ScalarList"): _addcmul,
    ("addcdiv", "Scalar"): _addcdiv,
    ("addcdiv", "ScalarList"): _addcdiv,
    ("addcmul", "Tensor"): _addcmul_tensor,
    ("addcdiv", "Tensor"): _addcdiv_tensor,
    ("norm", None): lambda x, ord=2, dtype=None: torch.linalg.vector_norm(x, ord, dtype=dtype),  # noqa: A006
    ("max", None): torch.max,
    ("zero", None): torch.zeros_like,
    ("copy", None): lambda x, src, non_blocking=False: aten.copy.default(x, src, non_blocking),
}

# Names with no per-tensor op in torch's namespace that means the same (left as externs).
_SKIP = frozenset({"powsum"})


def _per_element(name: str, overload: str) -> Callable | None:
    fn = _PER_ELEMENT.get((name, overload)) or _PER_ELEMENT.get((name, None))
    if fn is None and name not in _SKIP:
        fn = getattr(torch, name, None)
    return fn


def _is_list(arg) -> bool:
    """A `Tensor[]` or `Scalar[]` argument of the schema: one element per list entry."""
    return isinstance(arg.type, torch.ListType)


def decompose(op: torch._ops.OpOverload, per_element: Callable) -> Callable:
    """The decomposition of one `_foreach_*` overload into `per_element` calls."""
    arguments = op._schema.arguments

    def decomposed(*args, **kwargs):
        given = call_arguments(op._schema, args, kwargs)
        missing = [arg.name for arg in arguments if arg.name not in given]
        if missing:
            raise TypeError(f"{op}: missing argument {missing[0]}")
        values = [given[arg.name] for arg in arguments]
        count = next(len(v) for a, v in zip(arguments, values) if _is_list(a))
        results = []
        for k in range(count):
            positional, keywords = [], {}
            for arg, value in zip(arguments, values):
                one = value[k] if _is_list(arg) else value
                if arg.name == "scalars" and isinstance(value, torch.Tensor):
                    one = value[k]  # addcmul/addcdiv.Tensor: one scalar per element, in a tensor
                if arg.kwarg_only:
                    keywords[arg.name] = one
                else:
                    positional.append(one)
            results.append(per_element(*positional, **keywords))
        return results

    decomposed.__name__ = f"foreach_{op._schema.name[len(_PREFIX):]}_{op._overloadname}"
    return decomposed


def foreach_decompositions() -> dict:
    """{overload: decomposition} for every functional `_foreach_*` overload of this torch that
    has a per-tensor op (the in-place ones are functionalized into these before decomposition)."""
    table = {}
    for schema in torch._C._jit_get_all_schemas():
        name, overload = schema.name, schema.overload_name
        if not name.startswith(_PREFIX) or name.endswith("_") or overload.endswith("out"):
            continue
        base = name[len(_PREFIX):]
        packet = getattr(aten, f"_foreach_{base}", None)
        op = getattr(packet, overload or "default", None) if packet is not None else None
        per_element = _per_element(base, overload or "default")
        if op is not None and per_element is not None:
            table[op] = decompose(op, per_element)
    return table

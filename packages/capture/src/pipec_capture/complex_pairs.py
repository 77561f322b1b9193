"""Complex tensors as pairs of reals, before lowering.

pipec's IR has no complex dtype. Rotary embeddings written with complex numbers (Llama 4,
Meta's reference Llama, torchtitan: `torch.polar`, `view_as_complex`, a complex product,
`view_as_real`) made a whole graph run eagerly. Inside one graph they need no complex dtype: a
complex64 tensor of shape S is held as the float32 tensor of shape S + [2] that `view_as_real`
gives (real part, then imaginary), and each complex op becomes real ATen ops on those pairs,
which pipec lowers and fuses as any other:

    polar(r, t)          -> stack([r * cos(t), r * sin(t)], -1)
    view_as_complex(x)   -> x             view_as_real(z) -> z
    z * w                -> stack([zr * wr - zi * wi, zr * wi + zi * wr], -1)
    z * real             -> z * real (a tensor gets a trailing dim of 1; a scalar as is, / too)
    views of z           -> the same view of the pairs (dims counted without the pair dim)
    _fft_r2c / _fft_c2c / _fft_c2r (FNet's token mixing)
                         -> pipec.fft_{r2c,c2c,c2r}_pairs: the same FFT, a library call on
                            pairs (IR 1.8, fft_ops.py)

The pass is all or nothing: a graph whose inputs or outputs are complex, or with a complex op
not in `_RULES`, raises CaptureError naming the op, as capture failed on any complex value
before (outside fullgraph the graph runs eagerly, with that warning).
"""

from __future__ import annotations

import torch

from .errors import CaptureError
from .fft_ops import declare
from .fx_edit import call_node, drop_dead_code

aten = torch.ops.aten

_REAL_OF = {torch.complex64: torch.float32, torch.complex128: torch.float64}


def _is_complex(node) -> bool:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return isinstance(val, torch.Tensor) and val.is_complex()


def _complex_ndim(node) -> int:
    return node.meta["val"].dim()


def _dim(node, d: int) -> int:
    """Dim `d` of complex `node`, counted from the front (the pair dim stays last)."""
    return d + _complex_ndim(node) if d < 0 else d


class _Pairs:
    """Builds the real ops of one complex op, each with its fake value."""

    def __init__(self, graph: torch.fx.Graph, pairs: dict):
        self.graph, self.pairs = graph, pairs

    def of(self, node):
        return self.pairs[node] if isinstance(node, torch.fx.Node) and node in self.pairs else node

    def call(self, target, *args, **kwargs):
        return call_node(self.graph, target, args, kwargs)

    def part(self, z, i: int):
        return self.call(aten.select.int, z, -1, i)

    def join(self, real, imag):
        """stack([real, imag], -1), as the core decompositions write a stack (a cat of unsqueezes)."""
        parts = [self.call(aten.unsqueeze.default, x, -1) for x in (real, imag)]
        return self.call(aten.cat.default, parts, -1)


# ------------------------------------------------------------------ rules: node -> pairs node


def _polar(p: _Pairs, node):
    r, t = node.args
    return p.join(p.call(aten.mul.Tensor, r, p.call(aten.cos.default, t)),
                  p.call(aten.mul.Tensor, r, p.call(aten.sin.default, t)))


def _to_complex(p: _Pairs, node):
    (x,) = node.args
    real_dtype = _REAL_OF[node.meta["val"].dtype]
    if _is_complex(x):
        return p.call(aten._to_copy.default, p.of(x), dtype=real_dtype)
    x = p.call(aten._to_copy.default, x, dtype=real_dtype)
    return p.join(x, p.call(aten.zeros_like.default, x))


def _mul(p: _Pairs, node):
    a, b = node.args
    if _is_complex(a) and _is_complex(b):
        ar, ai, br, bi = (p.part(p.of(z), i) for z in (a, b) for i in (0, 1))
        mul, sub, add = aten.mul.Tensor, aten.sub.Tensor, aten.add.Tensor
        return p.join(p.call(sub, p.call(mul, ar, br), p.call(mul, ai, bi)),
                      p.call(add, p.call(mul, ar, bi), p.call(mul, ai, br)))
    z, s = (a, b) if _is_complex(a) else (b, a)
    if isinstance(s, torch.fx.Node):
        s = p.call(aten.unsqueeze.default, s, -1)
    return p.call(aten.mul.Tensor, p.of(z), s)


def _scale(p: _Pairs, node):
    """z * a real scalar (an FFT's backward scales its gradient): both parts scaled."""
    z, scalar = node.args
    return p.call(node.target, p.of(z), scalar)


def _both_pairs(p: _Pairs, node):
    """add / sub / the functional copy (an FFT's backward) of two complex values: of their pairs."""
    a, b = node.args
    return p.call(node.target, p.of(a), p.of(b), **node.kwargs)


def _conj(p: _Pairs, node):
    z = p.of(node.args[0])
    return p.join(p.part(z, 0), p.call(aten.neg.default, p.part(z, 1)))


def _same(p: _Pairs, node):
    """view_as_complex / view_as_real / resolve_conj / alias: the pairs are the value."""
    return p.of(node.args[0])


def _unsqueeze(p: _Pairs, node):
    z, d = node.args
    return p.call(aten.unsqueeze.default, p.of(z), d + _complex_ndim(z) + 1 if d < 0 else d)


def _reshape(p: _Pairs, node):
    z, shape = node.args[:2]
    return p.call(node.target, p.of(z), [*shape, 2])


def _permute(p: _Pairs, node):
    z, dims = node.args
    return p.call(aten.permute.default, p.of(z), [_dim(z, d) for d in dims] + [_complex_ndim(z)])


def _transpose(p: _Pairs, node):
    z, a, b = node.args
    return p.call(aten.transpose.int, p.of(z), _dim(z, a), _dim(z, b))


def _expand(p: _Pairs, node):
    z, sizes = node.args[:2]
    return p.call(aten.expand.default, p.of(z), [*sizes, 2])


def _dim_op(p: _Pairs, node):
    """slice / select / squeeze.dim: the same op on the pairs, its dim counted from the front."""
    z, d, *rest = node.args
    return p.call(node.target, p.of(z), _dim(z, d), *rest)


def _slice_scatter(p: _Pairs, node):
    """slice_scatter(z, src, dim, ...): the pairs of src into the pairs of z (an rfft's backward)."""
    z, src, d, *rest = node.args
    return p.call(node.target, p.of(z), p.of(src), _dim(z, d), *rest)


def _sum(p: _Pairs, node):
    """sum over complex dims: the pairs summed over the same dims (a broadcast weight's gradient)."""
    z, dims, *rest = node.args
    return p.call(node.target, p.of(z), [_dim(z, d) for d in dims], *rest)


def _new_zeros(p: _Pairs, node):
    """A complex zeros tensor (an rfft's backward pads into one): zero pairs."""
    base, size = node.args
    kwargs = {**node.kwargs, "dtype": _REAL_OF[node.meta["val"].dtype]}
    return p.call(aten.new_zeros.default, p.of(base), [*size, 2], **kwargs)


def _clone(p: _Pairs, node):
    return p.call(aten.clone.default, p.of(node.args[0]))


def _fft(name: str):
    """An ATen FFT as its `pipec.fft_*_pairs` target: the complex side as pairs, the rest as is."""
    def rule(p: _Pairs, node):
        declare()
        x, *rest = node.args
        return p.call(getattr(torch.ops.pipec, name).default, p.of(x), *rest)
    return rule


def _real_part(i: int):
    def rule(p: _Pairs, node):
        return p.part(p.of(node.args[0]), i)
    return rule


_RULES = {
    aten.polar.default: _polar,
    aten._to_copy.default: _to_complex,
    aten.mul.Tensor: _mul,
    aten.mul.Scalar: _scale,
    aten.div.Scalar: _scale,
    aten.add.Tensor: _both_pairs,
    aten.sub.Tensor: _both_pairs,
    aten.conj_physical.default: _conj,
    aten._conj.default: _conj,
    aten.view_as_complex.default: _same,
    aten.view_as_real.default: _same,
    aten.resolve_conj.default: _same,
    aten.alias.default: _same,
    aten.unsqueeze.default: _unsqueeze,
    aten.view.default: _reshape,
    aten.reshape.default: _reshape,
    aten._unsafe_view.default: _reshape,
    aten.permute.default: _permute,
    aten.transpose.int: _transpose,
    aten.expand.default: _expand,
    aten.slice.Tensor: _dim_op,
    aten.select.int: _dim_op,
    aten.squeeze.dim: _dim_op,
    aten.slice_scatter.default: _slice_scatter,
    aten.sum.dim_IntList: _sum,
    aten.new_zeros.default: _new_zeros,
    aten.copy.default: _both_pairs,
    aten.clone.default: _clone,
    aten.real.default: _real_part(0),
    aten.imag.default: _real_part(1),
    aten._fft_r2c.default: _fft("fft_r2c_pairs"),
    aten._fft_c2c.default: _fft("fft_c2c_pairs"),
    aten._fft_c2r.default: _fft("fft_c2r_pairs"),
}


def _supported(node) -> bool:
    """Whether `_RULES` covers this op that reads or makes a complex tensor."""
    rule = _RULES.get(node.target)
    if rule is None or node.op != "call_function":
        return False
    if node.target is aten._to_copy.default:
        keys = set(node.kwargs) - {"dtype"}
        return not keys and _is_complex(node)  # to complex; complex -> real drops a part: not here
    if rule is _new_zeros:
        return _is_complex(node) and len(node.args) == 2 and set(node.kwargs) <= {"dtype", "layout", "device",
                                                                                  "pin_memory"}
    if rule is _sum:
        return len(node.args) >= 2 and node.args[1] is not None and not node.kwargs
    if rule is _slice_scatter:
        return all(_is_complex(a) for a in node.args[:2]) and not node.kwargs
    if rule is _scale:
        return _is_complex(node.args[0]) and not isinstance(node.args[1], complex) and not node.kwargs
    if rule is _mul:  # a complex Python scalar has no pairs form here
        return not any(isinstance(a, complex) for a in node.args)
    if rule is _both_pairs:
        return all(_is_complex(a) for a in node.args[:2]) and set(node.kwargs) <= {"alpha"} \
            and not isinstance(node.kwargs.get("alpha", 1), complex)
    if rule is _reshape or rule is _expand:
        return len(node.args) == 2 and not node.kwargs
    return not node.kwargs


def _why_not(node) -> str | None:
    """Why the pairs form does not apply to `node` (which reads or makes a complex tensor)."""
    val = node.meta.get("val")
    if node.op == "placeholder":
        return f"graph input {node.name} is {val.dtype}"
    if node.op == "output":
        return "the graph returns a complex tensor"
    if _is_complex(node) and val.dtype not in _REAL_OF:
        return f"{node.name} is {val.dtype}"
    if not _supported(node):
        return f"{node.target} (node {node.name}{_source_line(node)}) has no form on real pairs"
    return None


def _source_line(node) -> str:
    trace = (node.meta.get("stack_trace") or "").strip().splitlines()
    files = [line.strip() for line in trace if line.strip().startswith("File ")]
    return f", {files[-1]}" if files else ""


def complex_as_pairs(gm: torch.fx.GraphModule) -> int:
    """Rewrite the complex ops of `gm` as real ops on (real, imaginary) pairs (module docstring);
    returns how many complex ops went (0: the graph has none). CaptureError where it does not
    apply, naming the op."""
    nodes = [n for n in gm.graph.nodes
             if _is_complex(n) or any(_is_complex(a) for a in n.all_input_nodes)]
    if not nodes:
        return 0
    for n in nodes:
        why = _why_not(n)
        if why is not None:
            raise CaptureError(f"complex tensors: {why} (pipec computes on complex values as real pairs "
                               "through polar, view_as_complex / view_as_real, +, -, *, conj, FFTs and views "
                               "only); run this part of the model outside pipec")
    pairs: dict = {}
    builder = _Pairs(gm.graph, pairs)
    for n in nodes:
        with gm.graph.inserting_before(n):
            new = _RULES[n.target](builder, n)
        if _is_complex(n):
            pairs[n] = new
        else:  # a real result (view_as_real, real, imag): its readers read the pairs' value
            n.replace_all_uses_with(new)
    for n in reversed(nodes):
        if not n.users:
            gm.graph.erase_node(n)
    drop_dead_code(gm.graph)
    gm.recompile()
    return len(nodes)

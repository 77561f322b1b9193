"""Symbolic sizes in codegen: view steps, size-valued `full`s, configs, memory plan, padding proofs.

(Running such programs needs the runtime to bind the symbols: the numeric checks are in the
repository's tests/test_dynamic_shapes.py.)
"""

import pytest
import sympy
from pipec_codegen_triton import generate_program
from pipec_codegen_triton.configs import pointwise_configs, reduction_configs, upper_bound
from pipec_codegen_triton.memory_plan import _best_fit
from pipec_codegen_triton.padding import pad_symbols
from pipec_ir import (
    CompileOptions, Graph, GraphInput, KernelPlan, Node, Ref, Size, SymbolRange, TensorType, dumps, get_attr,
    loads, make_attrs,
)
from pipec_ir.symbolic import IntSqrt, size_symbol

s0, s1 = size_symbol("s0"), size_symbol("s1")
SYMS = (SymbolRange("s0", 0, None, 4), SymbolRange("s1", 0, None, 5))


def T(*shape, dtype="float32"):
    return TensorType(tuple(sympy.sympify(s) for s in shape), dtype)


class G:
    def __init__(self):
        self.inputs, self.nodes = [], []

    def input(self, name, *shape):
        self.inputs.append(GraphInput(name, T(*shape)))
        return name

    def node(self, name, op, inputs, shape, **attrs):
        self.nodes.append(Node(name, op, tuple(inputs), T(*shape), make_attrs(**attrs)))
        return name

    def graph(self, outputs):
        return Graph("g", tuple(self.inputs), tuple(self.nodes), tuple(outputs), SYMS)


def kernel(name, kind, nodes, inputs, outputs, domain=(), reduce_dims=()):
    from pipec_ir import Kernel

    return Kernel(name, kind, tuple(nodes), tuple(outputs), tuple(inputs),
                  tuple(sympy.sympify(d) for d in domain), tuple(reduce_dims))


def compile_plan(graph, kernels):
    program = generate_program(KernelPlan(graph, "test", tuple(kernels)), CompileOptions())
    assert loads(dumps(program)) == program
    return program


def test_view_steps_encode_symbolic_sizes():
    g = G()
    x = g.input("x", s0, s1, 8)
    g.node("flat", "reshape", [x], (s0 * s1, 8))
    g.node("split", "reshape", ["flat"], (s0, s1, 8))
    g.node("tail", "slice", [x], (s0, 2, 8), dim=1, start=Size("s1 - 2"), step=1)
    g.node("last", "select", [x], (s0, 8), dim=1, index=Size("s1 - 1"))
    g.node("b", "reshape", ["last"], (s0, 1, 8))
    g.node("wide", "expand", ["b"], (s0, s1, 8))
    graph = g.graph(["flat", "split", "tail", "last", "wide"])
    kernels = [kernel(f"v{i}", "view", [n], [], [n]) for i, n in enumerate(("flat", "split", "tail", "last", "b",
                                                                            "wide"))]
    prog = compile_plan(graph, kernels)
    args = {s.outputs[0]: get_attr(s.attrs, "args") for s in prog.steps}
    assert args["flat"] == (Ref("x"), (-1, 8))  # one symbolic dim: -1
    assert args["split"] == (Ref("flat"), (Size("s0"), Size("s1"), 8))
    assert args["tail"] == (Ref("x"), 1, Size("s1 - 2"), Size("s1"), 1)  # end = start + step * length
    assert args["last"] == (Ref("x"), 1, Size("s1 - 1"))
    assert args["wide"] == (Ref("b"), (-1, Size("s1"), 8))  # kept dims are -1, broadcast ones sized


def test_size_valued_full_is_a_kernel_parameter():
    """mean over a symbolic dim: the count is a `full` of a Size, passed as an int parameter."""
    g = G()
    x = g.input("x", s0, s1)
    g.node("sum", "sum", [x], (s0, 1), dims=(1,), keepdim=True)
    g.node("n", "full", [], (s0, 1), value=Size("s1"))
    g.node("m", "full", [], (s0, 1), value=Size("Max(0, s1 - 1)"))
    g.node("mean", "div", ["sum", "n"], (s0, 1))
    g.node("var", "div", ["mean", "m"], (s0, 1))
    graph = g.graph(["var"])
    prog = compile_plan(graph, [kernel("pipec_red_0", "reduction", ["sum", "n", "m", "mean", "var"], [x], ["var"],
                                       (s0, s1), (1,))])
    [k] = prog.kernels
    sizes = dict(k.sizes)
    assert sizes["xnumel"] == s0 and sizes["rnumel"] == s1 and sizes["s1"] == s1
    assert sizes["ks0"] == s1 - 1  # Max(0, s1 - 1) with s1 >= 1
    assert "tl.full([XBLOCK, 1], s1, tl.float32)" in k.source
    assert "tl.full([XBLOCK, 1], ks0, tl.float32)" in k.source
    assert "for roffset in range(0, rnumel, RBLOCK)" in k.source  # a symbolic row: looped


def test_max_in_sizes_is_hoisted_into_parameters():
    """A clamped slice length (Max/Min) cannot be spelled in Triton: it becomes a parameter."""
    g = G()
    x = g.input("x", s0, s1, 16)
    length = sympy.Max(0, s1 - sympy.Max(0, s1 - 3))
    g.node("tail", "slice", [x], (s0, length, 16), dim=1, start=Size(str(sympy.Max(0, s1 - 3))), step=1)
    g.node("two", "full", [], (s0, length, 16), value=2.0)
    g.node("y", "mul", ["tail", "two"], (s0, length, 16))
    prog = compile_plan(g.graph(["y"]), [kernel("pipec_mul_0", "pointwise", ["tail", "two", "y"], [x], ["y"],
                                                (s0, length, 16))])
    [k] = prog.kernels
    assert "Max" not in k.source.split('"""')[2]  # not in the body (the docstring may say it)
    names = dict(k.sizes)
    assert set(names) >= {"xnumel", "ks0", "ks1"}
    assert all(isinstance(e, sympy.Expr) for e in names.values())


def test_symbolic_configs_cover_small_and_large_sizes():
    small = {dict(c.constants)["XBLOCK"] for c in pointwise_configs(s0 * 64)}
    assert min(small) <= 64 and max(small) >= 1024
    assert max(dict(c.constants)["XBLOCK"] for c in pointwise_configs(s0 * 4, upper=64)) <= 64
    assert upper_bound(s0 * 4, (SymbolRange("s0", 1, 16, 4),)) == 64
    assert upper_bound(s0 * 4, SYMS) is None
    rows = reduction_configs(s0, s1, persistent=False)
    assert any(dict(c.constants)["RBLOCK"] <= 32 for c in rows)  # short symbolic rows


def test_memory_plan_reuses_slots_that_always_fit():
    assert _best_fit([(sympy.sympify(512 * s0 + 64), 0)], sympy.sympify(256 * s0)) == (512 * s0 + 64, 0)
    assert _best_fit([(sympy.sympify(256 * s0), 0)], sympy.sympify(256 * s1)) is None
    assert _best_fit([(sympy.sympify(256 * s0), 0), (sympy.sympify(128 * s0), 1)],
                     sympy.sympify(128 * s0)) == (128 * s0, 1)  # exact match first
    # a symbolic slot that always fits, then a known one (a decode step's graph: a KV-cache
    # length beside fixed sizes): the known one, in either order, not a TypeError comparing them
    known, growing = (sympy.Integer(1024), 1), (sympy.sympify(512 * s0 + 512), 0)
    assert _best_fit([growing, known], sympy.Integer(256)) == known
    assert _best_fit([known, growing], sympy.Integer(256)) == known


# ------------------------------------------------------------ padding proofs


def mlp_like():
    g = G()
    x = g.input("x", s0, s1, 8)
    w = g.input("w", 8, 4)
    g.node("flat", "reshape", [x], (s0 * s1, 8))
    g.node("mm", "mm", ["flat", w], (s0 * s1, 4))
    g.node("act", "relu", ["mm"], (s0 * s1, 4))
    g.node("back", "reshape", ["act"], (s0, s1, 4))
    return g


def test_rows_merged_by_a_reshape_and_split_back_are_paddable():
    assert pad_symbols(mlp_like().graph(["back"])) == ("s0", "s1")


def test_a_merged_dim_returned_whole_pads_only_its_outer_symbol():
    assert pad_symbols(mlp_like().graph(["act"])) == ("s0",)


@pytest.mark.parametrize("case", ["reduce", "count", "slice", "transpose_reshape", "extern", "contract", "sqrt"])
def test_what_makes_a_symbol_unpaddable(case):
    g = G()
    x = g.input("x", s0, s1)
    if case == "reduce":  # softmax-like sum over the s1 dim
        g.node("y", "sum", [x], (s0,), dims=(1,), keepdim=False)
    elif case == "count":
        g.node("y", "full", [], (s0, s1), value=Size("s1"))
    elif case == "slice":
        g.node("y", "slice", [x], (s0, 2), dim=1, start=Size("s1 - 2"), step=1)
    elif case == "transpose_reshape":  # [s0, s1] -> [s1, s0] by reinterpreting memory
        g.node("y", "reshape", [x], (s1, s0))
    elif case == "extern":
        g.node("y", "extern", [x], (s0, s1), target="aten.cumsum.default", args=(Ref("x"), 1), kwargs=(),
               reason="no lowering")
    elif case == "contract":
        g.node("xt", "permute", [x], (s1, s0), dims=(1, 0))
        g.node("y", "mm", [x, "xt"], (s0, s0))
    elif case == "sqrt":  # DiT's unpatchify: a grid side IntSqrt(s0*s1) moves as either symbol is padded
        side = IntSqrt(s0 * s1)
        g.node("flat", "reshape", [x], (s0 * s1,))
        g.node("y", "reshape", ["flat"], (side, side))
    pads = pad_symbols(g.graph(["y"]))
    assert "s1" not in pads
    if case in ("reduce", "slice", "count"):
        assert pads == ("s0",)  # the other symbol is still fine
    if case == "sqrt":
        assert pads == ()


def test_group_norm_view_at_a_dynamic_resolution_reads_its_row_contiguously():
    """[2, 8, s0, s1] viewed as [2, 2, 4*s0*s1] (GroupNorm's groups, a diffusers UNet at a dynamic
    resolution): the view goes through the flat index, whose decomposition into [2, 8, s0, s1]
    cancels term by term (simplify.collapse with symbolic moduli and strides, nested floor
    divisions), so the sum's load has no `//` or `%`, as at static sizes (it had six)."""
    g = G()
    x = g.input("x", 2, 8, s0, s1)
    g.node("v", "reshape", [x], (2, 2, 4 * s0 * s1))
    g.node("sum", "sum", ["v"], (2, 2, 1), dims=(2,), keepdim=True)
    prog = compile_plan(g.graph(["sum"]), [kernel("pipec_red_0", "reduction", ["v", "sum"], [x], ["sum"],
                                                  (2, 2, 4 * s0 * s1), (2,))])
    [k] = prog.kernels
    [load] = [line for line in k.source.splitlines() if "tl.load" in line]
    assert "//" not in load and "%" not in load, load

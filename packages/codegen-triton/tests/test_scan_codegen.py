"""Scan kernels (scan.py): persistent rows, block loops carrying the running total, columns
(a scan dim that is not innermost), integer accumulation, logaddexp's infinities and NaN.

Each kernel is checked against eager PyTorch; a small RBLOCK (`constants=`) makes the loop
run several iterations over a short row, with a ragged last block.
"""

import math

import pytest
import torch
from pipec_codegen_triton import generate_program
from pipec_codegen_triton.padding import pad_symbols
from pipec_codegen_triton.writer import CodegenError
from pipec_ir import (
    CompileOptions, Graph, GraphInput, KernelPlan, Node, SymbolRange, TensorType, dumps, loads, make_attrs,
)
from pipec_ir.symbolic import size_symbol

from conftest import DT, kernel, run_program

LOOPED = CompileOptions().with_extra(persistent_reduction_limit=0)  # always walk the row in blocks
EAGER = {"add": torch.cumsum, "mul": torch.cumprod, "logaddexp": torch.logcumsumexp}


def compile_one(graph, k, options=LOOPED):
    program = generate_program(KernelPlan(graph, "test", (k,)), options)
    assert loads(dumps(program)) == program
    return program


def scan_kernel(b, shape, dim, combine="add", dtype="float32", prologue=None, epilogue=None):
    """[prologue(x) ->] scan along dim [-> epilogue(scan, x)], storing the last value."""
    x = b.input("x", shape, dtype)
    src = x
    if prologue:
        src = b.node("pro", prologue, [x], shape, dtype)
    b.node("s", "scan", [src], shape, dtype, dim=dim, combine=combine)
    out = "s"
    if epilogue:
        out = b.node("epi", epilogue, ["s", x], shape, dtype)
    g = b.graph([out])
    names = [n.name for n in g.nodes]
    return g, kernel("pipec_scan_0", "scan", names, ["x"], [out], shape, (dim,))


def test_persistent_row_in_one_pass(builder):
    g, k = scan_kernel(builder, (5, 7), 1, prologue="exp", epilogue="mul")
    prog = compile_one(g, k, CompileOptions())
    src = prog.kernels[0].source
    assert "tl.cumsum(" in src and "for roffset" not in src
    torch.manual_seed(0)
    x = torch.randn(5, 7)
    (out,) = run_program(prog, [x])
    torch.testing.assert_close(out, torch.cumsum(x.exp(), 1) * x)


@pytest.mark.parametrize("cols,persistent", [(4096, True), (16384, True), (16385, False), (32768, False)])
def test_scan_rows_stay_within_64_kib(builder, cols, persistent):
    """Reductions hold rows of up to 128 KiB; a scan 64 KiB (fp32 16384): beyond it, holding
    gained nothing on the H200."""
    g, k = scan_kernel(builder, (2, cols), 1)
    src = compile_one(g, k, CompileOptions()).kernels[0].source
    assert ("for roffset" not in src) == persistent


@pytest.mark.parametrize("combine", ["add", "mul", "logaddexp"])
@pytest.mark.parametrize("shape,dim,rblock", [
    ((6, 37), 1, 8),  # a row of five blocks, the last one ragged
    ((37,), 0, 8),  # one row (no x dims)
    ((3, 19, 5), 1, 4),  # a middle dim: x runs along the contiguous last dim (columns)
    ((21, 3), 0, 4),  # the outermost dim
])
def test_block_loop_carries_the_running_total(builder, combine, shape, dim, rblock):
    g, k = scan_kernel(builder, shape, dim, combine)
    prog = compile_one(g, k)
    src = prog.kernels[0].source
    assert src.count("for roffset in range") == 1 and "carry = " in src
    torch.manual_seed(1)
    x = torch.randn(shape)
    if combine == "mul":
        x = 1 + 0.1 * x  # a product of 37 values stays in range
    (out,) = run_program(prog, [x], constants={"RBLOCK": rblock})
    torch.testing.assert_close(out, EAGER[combine](x.double(), dim).float())


def test_columns_are_read_along_x(builder):
    g, k = scan_kernel(builder, (40, 16), 0)
    prog = compile_one(g, k)
    src = prog.kernels[0].source
    assert "(16*r0 + x0)" in src  # x0 is the contiguous index: each block row is one coalesced run
    x = torch.randn(40, 16)
    (out,) = run_program(prog, [x], constants={"RBLOCK": 16})
    torch.testing.assert_close(out, torch.cumsum(x, 0))


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("looped", [False, True])
def test_integers_accumulate_in_int64_and_wrap_like_eager(builder, dtype, looped):
    g, k = scan_kernel(builder, (3, 13), 1, "add", dtype, epilogue="mul")
    prog = compile_one(g, k, LOOPED if looped else CompileOptions())
    assert "tl.int64" in prog.kernels[0].source
    x = torch.full((3, 13), 2**29, dtype=DT[dtype])
    x[1] = torch.arange(-6, 7)
    (out,) = run_program(prog, [x], constants={"RBLOCK": 4} if looped else None)  # (a persistent block is the row)
    expected = torch.cumsum(x, 1, dtype=DT[dtype]) * x  # int32: the sums and products wrap
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_scan_in_float32(builder, dtype):
    g, k = scan_kernel(builder, (4, 50), 1, "add", dtype)
    prog = compile_one(g, k)
    assert "tl.cumsum(" in prog.kernels[0].source
    torch.manual_seed(2)
    x = torch.randn(4, 50).to(DT[dtype])
    (out,) = run_program(prog, [x], constants={"RBLOCK": 16})
    torch.testing.assert_close(out, torch.cumsum(x.float(), 1).to(DT[dtype]))


@pytest.mark.parametrize("looped", [False, True])
def test_logaddexp_infinities_and_nan(builder, looped):
    g, k = scan_kernel(builder, (5, 9), 1, "logaddexp")
    prog = compile_one(g, k, LOOPED if looped else CompileOptions())
    x = torch.randn(5, 9) * 30  # exp would overflow fp32
    x[0] = -math.inf  # -inf throughout: stays -inf (no inf - inf)
    x[1, 3] = math.inf  # +inf from there on
    x[2, 4] = math.nan  # NaN from there on
    x[3, :5] = -math.inf  # -inf, then finite values
    (out,) = run_program(prog, [x], constants={"RBLOCK": 4} if looped else None)  # (a persistent block is the row)
    torch.testing.assert_close(out, torch.logcumsumexp(x.double(), 1).float(), equal_nan=True)


def test_a_scan_kernel_stores_only_its_shape(builder):
    b = builder
    x = b.input("x", (4, 6))
    b.node("s", "scan", [x], (4, 6), dim=1, combine="add")
    b.node("r", "sum", ["s"], (4,), dims=(1,), keepdim=False)
    g = b.graph(["r"])
    with pytest.raises(CodegenError, match="output r does not have the scan's shape"):
        compile_one(g, kernel("pipec_bad_0", "scan", ["s", "r"], ["x"], ["r"], (4, 6), (1,)))


@pytest.mark.parametrize("merged", [False, True])
def test_a_scan_keeps_a_padded_prefix_unless_its_row_is_merged(merged):
    """Padding (padding.py): out[i] reads only x[0..i], so real rows stay real under padding;
    a row merged from [s0, s1] holds padding between its real elements (s1 is unsafe)."""
    s0, s1 = size_symbol("s0"), size_symbol("s1")
    shape = (s0 * s1,) if merged else (s0, s1)
    nodes = [Node("s", "scan", ("r" if merged else "x",), TensorType(shape, "float32"),
                  make_attrs(dim=len(shape) - 1, combine="add"))]
    if merged:
        nodes.insert(0, Node("r", "reshape", ("x",), TensorType(shape, "float32"), ()))
    graph = Graph("g", (GraphInput("x", TensorType((s0, s1), "float32")),), tuple(nodes), ("s",),
                  (SymbolRange("s0", 0, None, 4), SymbolRange("s1", 0, None, 5)))
    assert pad_symbols(graph) == (("s0",) if merged else ("s0", "s1"))


def test_every_ir_scan_combine_has_a_triton_row():
    from pipec_codegen_triton.scan import TRITON_SCANS
    from pipec_ir.ops import SCAN_COMBINES

    assert set(TRITON_SCANS) == set(SCAN_COMBINES)

"""Bounds-checked kernels (codegen option `bounds_check`, codegen-triton's bounds.py): every load and
store asserts that its offset lies inside its buffer where its mask holds, and Triton's
interpreter runs those assertions (the runtime turns its debug mode on for such kernels)."""

import dataclasses
import re

import pytest
import sympy
import torch
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

import pipec
import pipec_ir
from pipec.pipeline import compile_graph
from pipec_capture import core_decompositions
from pipec_runtime_cudagraph.launch import ProgramRunner

ACCESS = re.compile(r"\btl\.(load|store)\(")


def _sources(compiled) -> list[str]:
    return [source for graph in compiled.pipec_session.graphs for _, source in graph.kernels]


def every_kind(x, w, b, idx):
    y = nn.functional.gelu(x @ w + b)  # a GEMM template with its epilogue (and the cuBLAS alternative's pass)
    return (y, torch.softmax(x, -1).sum(0), x.gather(1, idx), torch.zeros(8).index_add(0, idx[:, 0], x[:, 0]),
            torch.cumsum(x, 1), x[:, 1::3].t() * 2)


@pytest.mark.parametrize("fusion", ["none", "default"])
def test_bounds_checked_kernels_assert_every_access_and_match_eager(fusion):
    torch.manual_seed(0)
    args = (torch.randn(5, 16), torch.randn(16, 8), torch.randn(8), torch.randint(0, 8, (5, 3)))
    compiled = pipec.compile(every_kind, bounds_check=True, fusion=fusion, choice="template")
    torch.testing.assert_close(compiled(*args), every_kind(*args))
    sources = _sources(compiled)
    assert sources and all("@triton.jit(debug=True)\ndef pipec_" in s for s in sources)
    for source in sources:  # one assertion per pointer access (a scatter's store is asserted as its position)
        accesses = len(ACCESS.findall(source)) + source.count("tl.atomic_add(")
        assert source.count("tl.device_assert(") >= accesses, source
    if fusion == "default":
        template = next(s for s in sources if "tl.dot(" in s)
        assert "load of arg0_1 out of bounds" in template and "load of arg1_1 out of bounds" in template


def test_without_the_option_kernels_are_unchanged():
    args = (torch.randn(5, 16), torch.randn(16, 8), torch.randn(8), torch.randint(0, 8, (5, 3)))
    compiled = pipec.compile(every_kind)
    compiled(*args)
    assert not any("device_assert" in s or "debug=True" in s for s in _sources(compiled))


def _program_with_wrong_numel(bounds_check: bool):
    """The Program of x * 2 + 1 on [5, 8] with its kernel's element count changed to 48, as a wrong
    size in codegen would: the last program instance reads and writes 8 elements past both buffers."""
    x = torch.randn(5, 8)
    gm = make_fx(lambda t: (t * 2 + 1,), decomposition_table=core_decompositions(), tracing_mode="fake")(x)
    options = pipec_ir.CompileOptions(cache="none").with_extra(bounds_check=bounds_check)
    program = compile_graph(gm, [x], options, stop_after="codegen")
    [kernel] = program.kernels
    wrong = sympy.Integer(48)
    kernel = dataclasses.replace(kernel, sizes=tuple((n, wrong if n == "xnumel" else e) for n, e in kernel.sizes),
                                 grid=((wrong, "XBLOCK"),))
    return dataclasses.replace(program, kernels=(kernel,)), options, x


def test_the_interpreter_catches_an_out_of_bounds_access():
    program, options, x = _program_with_wrong_numel(bounds_check=True)
    with pytest.raises(Exception, match=r"pipec_fused_mul_add_0: load of \w+ out of bounds"):
        ProgramRunner(program, options)([x])  # (unchecked, it writes past the output: heap corruption)


def test_a_constant_offset_outside_its_buffer_fails_at_compile_time():
    from pipec_codegen_triton.writer import CodegenError, KernelWriter

    class Writer(KernelWriter):
        def __init__(self):  # only what check_bounds reads
            self.bounds_check, self.kernel = True, type("K", (), {"name": "k"})
            self.types = {"buf": pipec_ir.TensorType((sympy.Integer(4),), "float32")}

    scope = type("Scope", (), {"lines": [], "indent": "    "})
    assert Writer().check_bounds(scope, "buf", "3", None, "load", sympy.Integer(3)) == "3"
    with pytest.raises(CodegenError, match="load of buf at 4, outside its 4 elements"):
        Writer().check_bounds(scope, "buf", "4", None, "load", sympy.Integer(4))


def test_bounds_check_must_be_a_bool():
    with pytest.raises(ValueError, match="bounds_check must be True or False"):
        pipec.compile(every_kind, bounds_check="yes")

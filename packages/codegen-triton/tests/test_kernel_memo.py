"""kernel_memo.py: kernels of the same structure (a model's layers) share one written source,
under their own names; the program is the one writing each kernel afresh gives, and it runs."""

import torch
from pipec_codegen_triton import generate, kernel_memo
from pipec_ir import CompileOptions, KernelPlan

from conftest import kernel, run_program


def _layers(b, n=3):
    """n softmax layers, each over the last one's output: kernels alike but for their names."""
    h = b.input("x", (5, 12))
    kernels = []
    for k in range(n):
        b.node(f"amax{k}", "max", [h], (5, 1), dims=(1,), keepdim=True)
        b.node(f"amax_e{k}", "expand", [f"amax{k}"], (5, 12))
        b.node(f"sub{k}", "sub", [h, f"amax_e{k}"], (5, 12))
        b.node(f"exp{k}", "exp", [f"sub{k}"], (5, 12))
        b.node(f"sum{k}", "sum", [f"exp{k}"], (5, 1), dims=(1,), keepdim=True)
        b.node(f"sum_e{k}", "expand", [f"sum{k}"], (5, 12))
        b.node(f"div{k}", "div", [f"exp{k}", f"sum_e{k}"], (5, 12))
        kernels.append(kernel(f"pipec_softmax_{k}", "reduction",
                              [f"amax{k}", f"amax_e{k}", f"sub{k}", f"exp{k}", f"sum{k}", f"sum_e{k}", f"div{k}"],
                              [h], [f"div{k}"], (5, 12), (1,)))
        h = f"div{k}"
    return KernelPlan(b.graph([h]), "test", tuple(kernels))


def test_layers_share_a_source_under_their_own_names(builder, monkeypatch):
    memos = []

    class Recorded(kernel_memo.WrittenKernels):
        def __init__(self, *args):
            super().__init__(*args)
            memos.append(self)

    plan = _layers(builder)
    monkeypatch.setattr(generate, "WrittenKernels", Recorded)
    program = generate.generate_program(plan, CompileOptions())
    (memo,) = memos
    assert memo.hits == 2
    for k, written in enumerate(program.kernels):
        assert f"def pipec_softmax_{k}(" in written.source and f'writes div{k}"""' in written.source
        assert written.source.replace(f"_{k}(", "_0(").replace(f"div{k}", "div0") == program.kernels[0].source

    class Afresh(kernel_memo.WrittenKernels):
        def write(self, kernel, write):
            return write()

    monkeypatch.setattr(generate, "WrittenKernels", Afresh)
    assert generate.generate_program(plan, CompileOptions()) == program
    x = torch.randn(5, 12, generator=torch.Generator().manual_seed(0))
    (out,) = run_program(program, [x])
    torch.testing.assert_close(out, x.softmax(1).softmax(1).softmax(1))


def test_bounds_checked_kernels_are_written_afresh(builder, monkeypatch):
    """Their assertions name the kernel and its buffers."""
    calls = []
    monkeypatch.setattr(kernel_memo.WrittenKernels, "write", lambda self, k, write: calls.append(k) or write())
    program = generate.generate_program(_layers(builder), CompileOptions().with_extra(bounds_check=True))
    assert not calls and all(f"pipec_softmax_{k}:" in p.source for k, p in enumerate(program.kernels))

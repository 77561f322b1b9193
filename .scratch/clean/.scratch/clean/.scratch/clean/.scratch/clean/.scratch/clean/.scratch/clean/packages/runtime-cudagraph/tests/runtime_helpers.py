"""Small hand-written Programs for the runtime tests (Triton sources written by hand)."""

from __future__ import annotations

import sympy

from pipec_ir import Buffer, LaunchConfig, Program, Slot, Step, TensorType, TritonKernel, make_attrs
from pipec_ir.symbolic import size_symbol

ADD_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def {name}(in_ptr0, in_ptr1, out_ptr0, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(in_ptr0 + offsets, mask=mask)
    b = tl.load(in_ptr1 + offsets, mask=mask)
    tl.store(out_ptr0 + offsets, a + b, mask=mask)
'''

ROWSUM_SOURCE = '''\
import triton
import triton.language as tl


@triton.jit
def {name}(in_ptr0, out_ptr0, rows, cols, ROWS: tl.constexpr, COLS: tl.constexpr):
    pid = tl.program_id(0)
    rindex = pid * ROWS + tl.arange(0, ROWS)
    r = rindex[:, None]
    c = tl.arange(0, COLS)[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(in_ptr0 + r * cols + c, mask=mask, other=0.0).to(tl.float32)
    acc = tl.sum(x, axis=1)
    tl.store(out_ptr0 + rindex, acc, mask=rindex < rows)
'''


def T(shape, dtype="float32") -> TensorType:
    return TensorType(tuple(sympy.sympify(d) for d in shape), dtype)


def add_kernel(name: str, n, configs=None) -> TritonKernel:
    n = sympy.sympify(n)
    return TritonKernel(
        name=name, source=ADD_SOURCE.format(name=name), args=("in_ptr0", "in_ptr1", "out_ptr0"),
        sizes=(("n", n),), grid=((n, "BLOCK"),),
        configs=configs or (LaunchConfig(constants=(("BLOCK", 64),), num_warps=4, num_stages=1),))


def rowsum_kernel(name: str, rows, cols) -> TritonKernel:
    rows, cols = sympy.sympify(rows), sympy.sympify(cols)
    return TritonKernel(
        name=name, source=ROWSUM_SOURCE.format(name=name), args=("in_ptr0", "out_ptr0"),
        sizes=(("rows", rows), ("cols", cols)), grid=((rows, "ROWS"),),
        configs=(LaunchConfig(constants=(("ROWS", 4), ("COLS", 64)), num_warps=4, num_stages=1),))


def add_program(n=100, dtype="float32", configs=None) -> Program:
    return Program(
        name="add_prog",
        inputs=(Buffer("x", T([n], dtype)), Buffer("y", T([n], dtype))),
        outputs=("out",),
        buffers=(Buffer("out", T([n], dtype)),),
        kernels=(add_kernel("pipec_add_0", n, configs),),
        steps=(Step("launch", "pipec_add_0", ("x", "y"), ("out",)),),
    )


def dynamic_add_program() -> Program:
    from pipec_ir import SymbolRange

    s0 = size_symbol("s0")
    return Program(
        name="dyn_add",
        inputs=(Buffer("x", T([s0])), Buffer("y", T([s0]))),
        outputs=("out",),
        buffers=(Buffer("out", T([s0])),),
        kernels=(add_kernel("pipec_add_dyn_0", s0),),
        steps=(Step("launch", "pipec_add_dyn_0", ("x", "y"), ("out",)),),
        symbols=(SymbolRange("s0", 2, 4096, 64),),
    )


def slot_program(rows=8, cols=37) -> Program:
    """x[rows, cols] -> t1 = x + x (slot 0) -> t2 = rowsum(t1) (slot 1) -> t3 = t2 + t2 (slot 0 again)."""
    n = rows * cols
    return Program(
        name="slots",
        inputs=(Buffer("x", T([rows, cols])),),
        outputs=("t3", "t2"),
        buffers=(Buffer("t1", T([rows, cols]), slot=0), Buffer("t2", T([rows]), slot=1),
                 Buffer("t3", T([rows]), slot=0)),
        kernels=(add_kernel("pipec_add_big", n), rowsum_kernel("pipec_sum_rows", rows, cols),
                 add_kernel("pipec_add_small", rows)),
        steps=(Step("launch", "pipec_add_big", ("x", "x"), ("t1",)),
               Step("launch", "pipec_sum_rows", ("t1",), ("t2",)),
               Step("launch", "pipec_add_small", ("t2", "t2"), ("t3",))),
        slots=(Slot(0, sympy.Integer(n * 4)), Slot(1, sympy.Integer(rows * 4))),
        peak_bytes=sympy.Integer(n * 4 + rows * 4),
    )


def extern_program(m=6, k=5, n=7) -> Program:
    """wt = permute(w); mm = x @ wt (extern, read by a launch); out = mm + b; also returns xt = x.T."""
    from pipec_ir import Ref

    return Program(
        name="externs",
        inputs=(Buffer("x", T([m, k])), Buffer("w", T([n, k])), Buffer("b", T([m, n]))),
        outputs=("out", "xt", None, "out"),
        buffers=(Buffer("wt", T([k, n])), Buffer("mm", T([m, n])), Buffer("out", T([m, n])),
                 Buffer("xt", T([k, m]))),
        kernels=(add_kernel("pipec_add_mm", m * n),),
        steps=(
            Step("extern", "aten.permute.default", ("w",), ("wt",),
                 make_attrs(args=(Ref("w"), (1, 0)), kwargs=())),
            Step("extern", "aten.mm.default", ("x", "wt"), ("mm",), make_attrs(args=(Ref("x"), Ref("wt")))),
            Step("launch", "pipec_add_mm", ("mm", "b"), ("out",)),
            Step("extern", "aten.permute.default", ("x",), ("xt",), make_attrs(args=(Ref("x"), (1, 0)))),
        ),
    )

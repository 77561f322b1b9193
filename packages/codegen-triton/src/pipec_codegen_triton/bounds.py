"""Bounds-checked kernels (codegen option `bounds_check`).

With the option on, every load and store of a generated kernel first asserts
(`tl.device_assert`) that its element offset lies inside the buffer it reads or writes,
`0 <= offset < numel`, wherever the access's mask is true (a masked-off lane may compute
any offset: it touches no memory). `KernelWriter.check_bounds` writes the assertion for
pointwise, reduction, scan, scatter and `take` accesses and a GEMM epilogue's; this module
adds the GEMM template's operand tiles, whose pointers advance through the K loop.

Such kernels are decorated `@triton.jit(debug=True)`: Triton drops device assertions
otherwise. On a GPU a failed one stops the kernel with "device-side assert triggered" and
the message names the kernel, the access and the buffer; in Triton's interpreter (the
runtime runs debug kernels with the interpreter's debug mode on) it raises. Accesses through
TMA descriptors (the persistent and Gluon GEMM kernels) are not instrumented: the TMA unit
itself drops what falls outside a descriptor's shape.
"""

from __future__ import annotations

from pipec_ir.symbolic import numel

# The GEMM template's K loop (matmul_template writes it, check_operands finds it)
K_LOOP = "    for k in range(0, tl.cdiv(K, BLOCK_K)):"
_ACC = "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"


def check_operands(writer, body: list[str], a: tuple, b: tuple) -> list[str]:
    """`body` (the template's main loop, matmul_template._main_loop) with each K step's A and B
    tile offsets asserted inside their buffers where the K mask holds. `a`, `b`: (buffer,
    offset of its first element in the tile walk as source or "", the row stride, the column
    stride) as the template prints them (A is [M, K], B is [K, N])."""
    if K_LOOP not in body or _ACC not in body:
        raise ValueError("bounds_check: the GEMM template's main loop has changed; update bounds.check_operands")
    a_buf, a_base, s_am, s_ak = a
    b_buf, b_base, s_bk, s_bn = b
    base_a = f"{a_base} + " if a_base else ""
    base_b = f"{b_base} + " if b_base else ""
    start = [f"    a_offs = {base_a}ram[:, None] * {s_am} + rk[None, :] * {s_ak}",
             f"    b_offs = {base_b}rk[:, None] * {s_bk} + rbn[None, :] * {s_bn}"]
    a_extent = writer.print_size(numel(writer.types[a_buf].shape))
    b_extent = writer.print_size(numel(writer.types[b_buf].shape))
    name = writer.kernel.name
    step = [
        f"        a_at = a_offs + k * BLOCK_K * {s_ak}",
        f"        b_at = b_offs + k * BLOCK_K * {s_bk}",
        f"        tl.device_assert(((a_at >= 0) & (a_at < ({a_extent}))) | ~(rk[None, :] < K - k * BLOCK_K), "
        f'"{name}: load of {a_buf} out of bounds")',
        f"        tl.device_assert(((b_at >= 0) & (b_at < ({b_extent}))) | ~(rk[:, None] < K - k * BLOCK_K), "
        f'"{name}: load of {b_buf} out of bounds")',
    ]
    out = list(body)
    out[out.index(_ACC):out.index(_ACC)] = start
    loop = out.index(K_LOOP) + 1
    out[loop:loop] = step
    return out

"""Write the Triton source of a scan kernel (docs/IR.md, "Scans").

A scan kernel is laid out like a reduction kernel (writer.py): one row per x (every index of
the dims other than the scan dim), the row along r (the scan dim), blocks of
[XBLOCK, RBLOCK]. Its pointwise prologue is evaluated on the row block, the block is scanned
with `tl.cumsum` / `tl.cumprod` / `tl.associative_scan`, and the epilogue and every store use
the scanned block at the same index:

* a row that fits in one block ("persistent") is loaded, scanned and stored in one pass;
* a longer row is walked block by block, left to right, carrying the running total of the
  blocks before (`carry`, [XBLOCK, 1]): the block's result is carry ⊕ scan(block), then
  carry = carry ⊕ reduce(block).

When the scan dim is not the innermost one (a cumsum down the columns), x runs along the
contiguous dim (configs.py's column shape: XBLOCK wide, RBLOCK short), so loads stay
coalesced. Half types accumulate in float32 and integers in int64; the result is cast to the
node's compute type, so the epilogue sees what eager would.
"""

from __future__ import annotations

from pipec_ir.ops import SCAN_COMBINES, VIEW, kind_of

from .configs import PERSISTENT_SCAN_BYTES
from .dtypes import FLOAT_COMPUTE, tl_compute
from .kernel_source import CodegenError, writes_clause
from .reductions import literal_of_identity
from .writer import KernelWriter

SCAN_HELPERS = '''
@triton.jit
def _pipec_logaddexp(a, b):
    # log(exp(a) + exp(b)) without overflow; equal infinities give themselves, NaN propagates
    hi = tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
    lo = tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
    same = lo == hi  # (both -inf: no inf - inf)
    delta = tl.where(same, 0.0, lo) - tl.where(same, 0.0, hi)
    return hi + tl.log(1.0 + tl.exp(delta))
'''

# codegen's row per scan combine (pipec_ir.ops.SCAN_COMBINES gives its identity):
# combine -> (scan of a block along axis 1, combine of two values, reduction of a block along
#             axis 1 keeping a [XBLOCK, 1] shape)
TRITON_SCANS = {
    "add": ("tl.cumsum({x}, 1)", "{a} + {b}", "tl.sum({x}, 1)[:, None]"),
    "mul": ("tl.cumprod({x}, 1)", "{a} * {b}", "tl.reduce({x}, 1, _pipec_product)[:, None]"),
    "logaddexp": ("tl.associative_scan({x}, 1, _pipec_logaddexp)", "_pipec_logaddexp({a}, {b})",
                  "tl.reduce({x}, 1, _pipec_logaddexp)[:, None]"),
}


def _identity(combine: str, dtype: str) -> str:
    """The Triton literal of `combine`'s identity for values of `dtype`."""
    return literal_of_identity(SCAN_COMBINES[combine].identity, dtype)


def accumulator_type(dtype: str) -> str:
    """float16/bfloat16 scan in float32, float32/float64 in themselves, integers in int64."""
    return tl_compute(dtype) if dtype in FLOAT_COMPUTE else "tl.int64"


class ScanWriter(KernelWriter):
    """KernelWriter for a `scan` kernel: the same index machinery, a row walk in scan order."""

    def __init__(self, graph, kernel, persistent_limit: int | None = None,
                 persistent_bytes: int = PERSISTENT_SCAN_BYTES, bounds_check: bool = False, tiles: bool = False):
        # `tiles` concerns pointwise kernels only (tiling.py): a scan walks its rows its own way
        super().__init__(graph, kernel, persistent_limit=persistent_limit, persistent_bytes=persistent_bytes,
                         bounds_check=bounds_check)
        scans = [n for n in kernel.nodes if self.nodes[n].op == "scan"]
        if len(scans) != 1 or len(self.reduced) != 1:
            raise CodegenError(f"{kernel.name}: a scan kernel holds one scan along one dim, got {scans} "
                               f"along dims {list(kernel.reduce_dims)}")
        self.scan = self.nodes[scans[0]]
        if (self.scan.attr("dim"),) != tuple(kernel.reduce_dims) or tuple(self.scan.type.shape) != self.domain:
            raise CodegenError(f"{kernel.name}: scan {self.scan.name} does not run over the kernel's domain "
                               f"along its dim {list(kernel.reduce_dims)}")
        if self.scan.attr("combine") not in TRITON_SCANS:
            raise CodegenError(f"{kernel.name}: no Triton scan for combine {self.scan.attr('combine')!r}")
        self.scan_value: tuple[str, tuple] | None = None  # (variable, index) in the current row scope

    def _compute(self, name, index):
        if name != self.scan.name:
            return super()._compute(name, index)
        if self.scan_value is None:
            raise CodegenError(f"{self.kernel.name}: scan {name} read before it is computed")
        var, own = self.scan_value
        if tuple(index) != tuple(own):
            raise CodegenError(f"{self.kernel.name}: scan {name} is read at another index ({index} vs {own})")
        return var, True

    def _write_body(self) -> list[str]:
        lines = self._open_rows()
        for o in self.kernel.outputs:
            if not self._row_level(o):
                raise CodegenError(f"{self.kernel.name}: output {o} does not have the scan's shape")
        if self.persistent:
            self.inner = self._open_row(None)
            self._scan_block(carry=None)
            self._store_rows()
        else:
            acc = accumulator_type(self.types[self.scan.inputs[0]].dtype)
            init = _identity(self.scan.attr("combine"), self.types[self.scan.inputs[0]].dtype)
            lines.append(f"    carry = tl.full([XBLOCK, 1], {init}, {acc})  # the row's total before this block")
            self.inner = self._open_row([])
            self._scan_block(carry="carry")
            self._store_rows()
            lines += self.inner.lines
        self.inner = None
        self.scan_value = None
        return lines

    def _scan_block(self, carry: str | None) -> None:
        """Scan the current row block (and fold in and advance `carry` when looping)."""
        node, s = self.scan, self.inner
        scan, combine, reduce = TRITON_SCANS[node.attr("combine")]
        src = node.inputs[0]
        init = _identity(node.attr("combine"), self.types[src].dtype)
        acc = accumulator_type(self.types[src].dtype)
        v, _ = self.value(src, self.domain_index)
        if acc != tl_compute(self.types[src].dtype):
            v = f"{v}.to({acc})"
        # a full [XBLOCK, RBLOCK] block (an input constant along the row is [XBLOCK, 1]); lanes past the
        # row's end hold the identity, so the carry's reduction of the last block stays finite
        block = self.emit(s, f"tl.where(xmask & rmask, {v}, {init})")
        result = self.emit(s, scan.format(x=block))
        if carry is not None:
            result = self.emit(s, combine.format(a=carry, b=result))
            s.lines.append(f"{s.indent}{carry} = {combine.format(a=carry, b=reduce.format(x=block))}")
        ctype = tl_compute(node.type.dtype)
        if ctype != acc:  # an integer total wraps to the node's dtype, as eager's does
            result = self.emit(s, f"{result}.to({ctype})")
        self.scan_value = (result, self.domain_index)

    def _store_rows(self) -> None:
        for o in self.kernel.outputs:
            var, _ = self.value(o, self.domain_index)
            self._store(self.inner, o, var, self._row_offset(o), "xmask & rmask")

    def _helpers(self, body: list[str]) -> str:
        text = "\n".join(body)
        mine = SCAN_HELPERS.strip() + "\n" if "_pipec_logaddexp" in text else ""
        return super()._helpers(body) + ("\n\n" + mine if mine else "")

    def _docstring(self) -> str:
        ops = [self.nodes[n].op for n in self.kernel.nodes if kind_of(self.nodes[n].op) != VIEW]
        dom = ", ".join(map(str, self.domain))
        return (f"{' -> '.join(ops)} over [{dom}], an inclusive {self.scan.attr('combine')} scan along dim "
                f"{self.scan.attr('dim')}{writes_clause(self.kernel.outputs)}")

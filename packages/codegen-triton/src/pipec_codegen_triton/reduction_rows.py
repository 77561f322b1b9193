"""The row half of `KernelWriter` (writer.py): reduction kernels, one row per x.

A row that fits in one block is reduced in one pass ("persistent"); otherwise each
reduction gets its own loop over the row (`row_loops.plan_row_loops` groups those that share
a pass: online softmax, Welford), and a final loop writes row-level outputs. How each
reduction op accumulates and finishes is its row in reductions.py.
"""

from __future__ import annotations

import sympy
from pipec_ir.ops import REDUCTION, kind_of, reduction_of
from pipec_ir.symbolic import contiguous_strides

from .dtypes import tl_compute
from .kernel_source import CodegenError, Scope
from .reductions import TRITON_REDUCTIONS, TritonReduction, identity_literal
from .row_loops import plan_row_loops


class ReductionRows:
    """Mixed into `KernelWriter`: the methods that write a reduction kernel's rows (they use
    the writer's evaluation: `value`, `emit`, the scopes and the domain)."""

    def _row_level(self, name) -> bool:
        return tuple(self.types[name].shape) == self.domain

    def _outer_index(self, name) -> tuple:
        """Index into a reduced-shape value (keepdim or not) for the current row."""
        shape = self.types[name].shape
        if len(shape) == len(self.domain):
            return tuple(sympy.Integer(0) if d in self.reduced else self.domain_index[d] for d in range(len(shape)))
        return tuple(self.domain_index[d] for d in self.kept)

    def _open_rows(self) -> list[str]:
        """The outer scope of a row kernel (reductions, scans): XBLOCK rows per program, the row
        coordinates defined, `rbase` ready for the row's blocks; returns its lines."""
        self.outer = Scope([], inner=False, indent="    ")
        self.inner = None
        lines = self.outer.lines
        lines += ["    xoffset = tl.program_id(0) * XBLOCK",
                  "    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]",
                  self._mask("xmask", "xindex", "xnumel", self.xnumel, "XBLOCK", "[XBLOCK, 1]"),
                  "    rbase = tl.arange(0, RBLOCK)[None, :]"]
        self._define_indices(self.outer, self.xsyms, self.kept, "xindex")
        return lines

    def _write_reduction(self) -> list[str]:
        lines = self._open_rows()
        reductions = [n for n in self.kernel.nodes if kind_of(self.nodes[n].op) == REDUCTION]
        row_outputs = [o for o in self.kernel.outputs if self._row_level(o)]
        outer_outputs = [o for o in self.kernel.outputs if o not in row_outputs]
        if self.persistent:
            # One pass: the row and the per-row values share one list of lines.
            self.inner = self._open_row(None)
            for r in reductions:
                self._reduce_persistent(r)
            for o in row_outputs:
                var, _ = self.value(o, self.domain_index)
                self._store(self.inner, o, var, self._row_offset(o), "xmask & rmask")
        else:
            for loop in plan_row_loops(self.nodes, self.kernel.nodes, self.rnumel):
                self._reduce_loop(loop)
            if row_outputs:
                self.inner = self._open_row(lines)
                for o in row_outputs:
                    var, _ = self.value(o, self.domain_index)
                    self._store(self.inner, o, var, self._row_offset(o), "xmask & rmask")
                lines += self.inner.lines
        self.inner = None
        for o in outer_outputs:
            var, _ = self.value(o, self._outer_index(o))
            self._store(self.outer, o, var, "xindex", "xmask")
        return lines

    def _flat_offset(self, name):
        return sum((i * s for i, s in zip(self.domain_index, contiguous_strides(self.domain))), sympy.Integer(0))

    def _row_offset(self, name) -> str:
        """Store offset of a row-level value, always a full [XBLOCK, RBLOCK] block of pointers."""
        offset = self._flat_offset(name)
        text = self.print_index(offset)
        if not (self._has_x([offset]) and self._has_r([offset])):
            text += " + tl.zeros([XBLOCK, RBLOCK], tl.int32)"
        return text

    def _open_row(self, loop_lines):
        """Start the row scope: one pass (persistent) or a `for roffset` loop."""
        if loop_lines is None:
            scope = Scope(self.outer.lines, inner=True, indent="    ")
            scope.lines += ["    rindex = rbase",
                            self._mask("rmask", "rindex", "rnumel", self.rnumel, "RBLOCK", "[1, RBLOCK]")]
        else:
            self.row_passes += 1
            scope = Scope([], inner=True, indent="        ")
            scope.lines += ["    for roffset in range(0, rnumel, RBLOCK):",
                            "        rindex = roffset + rbase",
                            "    " + self._mask("rmask", "rindex", "rnumel", self.rnumel, "RBLOCK", "[1, RBLOCK]")]
        syms, _, dims = self.walked_row()
        self._define_indices(scope, syms, dims, "rindex")
        return scope

    def _reduce_setup(self, name):
        node = self.nodes[name]
        if tuple(node.attr("dims")) != tuple(self.kernel.reduce_dims):
            raise CodegenError(f"{self.kernel.name}: {name} reduces dims {node.attr('dims')}, kernel reduces "
                               f"{list(self.kernel.reduce_dims)}")
        src = node.inputs[0]
        if tuple(self.types[src].shape) != self.domain:
            raise CodegenError(f"{self.kernel.name}: {name} reads shape {self.types[src].shape}, not the domain")
        return node, src

    def _identity(self, node) -> str:
        return identity_literal(node.op, self.types[node.inputs[0]].dtype)

    def _row(self, node) -> TritonReduction:
        """Codegen's row for the reduction `node` (reductions.py)."""
        row = TRITON_REDUCTIONS.get(node.op)
        if row is None:
            raise CodegenError(f"{self.kernel.name}: no Triton row for reduction {node.op} ({node.name})")
        return row

    def _combine_fn(self, node) -> str:
        """The combine function of reduction `node` for its input's dtype."""
        return self._row(node).fn(self.types[node.inputs[0]].dtype)

    def _reduce_persistent(self, name):
        node, src = self._reduce_setup(name)
        v, _ = self.value(src, self.domain_index)
        s = self.inner
        init = self._identity(node)
        masked = self.emit(s, f"tl.where(xmask & rmask, {v}, {init})")
        result = self._finish(s, node, masked, "tl.broadcast_to(rindex, [XBLOCK, RBLOCK])")
        self.reduction_values[name] = (result, self._outer_index(name))

    def _finish(self, scope, node, acc, idx):
        row = self._row(node)
        if reduction_of(node.op).indexed:  # the index of the (value, index) pair picked
            pair = self.fresh()
            scope.lines.append(f"{scope.indent}_, {pair} = tl.reduce(({acc}, {idx}), 1, {self._combine_fn(node)})")
            text = f"{pair}[:, None].to(tl.int64)"
        else:
            text = row.finish.format(acc=acc, fn=self._combine_fn(node) if row.fn else "")
        return self.emit(scope, text)

    def _reduce_loop(self, items):
        """One `for roffset` loop over the row updating the accumulators of every item
        (row_loops.LoopItem), then each item's per-row results."""
        starts = {"plain": self._plain_loop, "online_softmax": self._online_softmax_loop,
                  "welford": self._welford_loop}
        steps = [starts[item.kind](*item.reductions) for item in items]  # accumulators set up
        self.inner = self._open_row([])
        for update, _ in steps:
            update(self.inner)
        self.outer.lines.extend(self.inner.lines)
        self.inner = None
        for _, finish in steps:
            finish(self.outer)

    def _accumulator(self, init: str, ctype: str) -> str:
        acc = self.fresh()
        self.outer.lines.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {init}, {ctype})")
        return acc

    def _plain_loop(self, name):
        node, src = self._reduce_setup(name)
        row = self._row(node)
        ctype = row.accumulator or tl_compute(self.types[src].dtype)
        init = self._identity(node)
        acc = self._accumulator(init, ctype)
        idx = self._accumulator("2147483647", "tl.int32") if reduction_of(node.op).indexed else None
        fn = self._combine_fn(node) if row.fn else ""

        def update(s):
            v, _ = self.value(src, self.domain_index)
            masked = self.emit(s, f"tl.where(xmask & rmask, {v}, {init})")
            if idx is not None:
                ridx = "tl.where(xmask & rmask, tl.broadcast_to(rindex, [XBLOCK, RBLOCK]), 2147483647)"
                s.lines.append(f"{s.indent}{acc}, {idx} = {fn}({acc}, {idx}, {masked}, {ridx})")
                return
            s.lines.append(f"{s.indent}{acc} = {row.combine.format(acc=acc, x=masked, fn=fn)}")

        def finish(scope):
            result = self._finish(scope, node, acc, idx)
            self.reduction_values[name] = (result, self._outer_index(name))

        return update, finish

    def _online_softmax_loop(self, peak_name, total_name):
        """max(a) and sum(exp(a - max(a))) in one pass: per lane a running max m and a running
        sum s of exp(a - m), rescaled by exp(m_old - m_new) whenever m grows."""
        node, src = self._reduce_setup(peak_name)
        self._reduce_setup(total_name)
        ctype = tl_compute(self.types[src].dtype)
        m_acc = self._accumulator("float('-inf')", ctype)
        s_acc = self._accumulator("0", ctype)

        def update(s):
            v, _ = self.value(src, self.domain_index)
            a = self.emit(s, f"tl.where(xmask & rmask, {v}, float('-inf'))")
            m_new = self.emit(s, f"{self._combine_fn(node)}({m_acc}, {a})")
            # a lane that has seen only -inf keeps s = 0 (exp(-inf - -inf) would be NaN)
            m_safe = self.emit(s, f"tl.where({m_new} == float('-inf'), 0.0, {m_new})")
            s.lines.append(f"{s.indent}{s_acc} = {s_acc} * tl.exp({m_acc} - {m_safe}) + tl.exp({a} - {m_safe})")
            s.lines.append(f"{s.indent}{m_acc} = {m_new}")

        def finish(scope):
            peak = self.emit(scope, f"tl.reduce({m_acc}, 1, {self._combine_fn(node)})[:, None]")
            # a row of only -inf gives NaN here, as sum(exp(a - max)) does in eager
            total = self.emit(scope, f"tl.sum({s_acc} * tl.exp({m_acc} - {peak}), 1)[:, None]")
            self.reduction_values[peak_name] = (peak, self._outer_index(peak_name))
            self.reduction_values[total_name] = (total, self._outer_index(total_name))

        return update, finish

    def _welford_loop(self, total_name, squares_name):
        """sum(a) and sum((a - mean)**2) in one pass: a plain running sum, plus per lane
        Welford's running mean and M2 (sum of squared deviations) over a count."""
        _, src = self._reduce_setup(total_name)
        self._reduce_setup(squares_name)
        ctype = tl_compute(self.types[src].dtype)
        sum_acc, mean_acc, m2_acc, count = (self._accumulator("0", ctype) for _ in range(4))

        def update(s):
            v, _ = self.value(src, self.domain_index)
            s.lines.append(f"{s.indent}{sum_acc} = {sum_acc} + tl.where(xmask & rmask, {v}, 0)")
            s.lines.append(f"{s.indent}{count} = {count} + tl.where(xmask & rmask, 1.0, 0.0)")
            delta = self.emit(s, f"{v} - {mean_acc}")
            s.lines.append(f"{s.indent}{mean_acc} = {mean_acc} + "
                           f"tl.where(xmask & rmask, {delta} / tl.maximum({count}, 1.0), 0.0)")
            s.lines.append(f"{s.indent}{m2_acc} = {m2_acc} + tl.where(xmask & rmask, {delta} * ({v} - {mean_acc}), 0.0)")

        def finish(scope):
            total = self.emit(scope, f"tl.sum({sum_acc}, 1)[:, None]")
            m2 = self.fresh()
            scope.lines.append(f"{scope.indent}_, {m2}, _ = tl.reduce(({mean_acc}, {m2_acc}, {count}), 1, "
                               "_pipec_welford)")
            self.reduction_values[total_name] = (total, self._outer_index(total_name))
            self.reduction_values[squares_name] = (self.emit(scope, f"{m2}[:, None]"),
                                                   self._outer_index(squares_name))

        return update, finish

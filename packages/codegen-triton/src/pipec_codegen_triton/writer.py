"""Write the Triton source of one pointwise or reduction kernel.

Every node is evaluated *at an index*: a tuple of sympy expressions over the
kernel's domain variables (`x0, x1, ...` for kept dims, `r0, ...` for reduced
ones). Views remap the index and compute nothing; loads turn an index into a
pointer offset; pointwise ops combine their operands at the same index. Values
are cached per (value, index), so a value read twice through the same view is
computed once.

Reduction kernels have an outer scope (one row per x, shape [XBLOCK, 1]) and an
inner scope (the row, [XBLOCK, RBLOCK]). A row that fits in one block is handled
in one pass ("persistent"); otherwise each reduction gets its own loop over the
row, and a final loop writes row-level outputs (reduction_rows.py).
"""

from __future__ import annotations

import re

import sympy
from pipec_ir import ITEMSIZE, Graph, Kernel, Size, TensorType
from pipec_ir.indexing import view_source_index
from pipec_ir.ops import CREATION, POINTWISE, REDUCTION, VIEW, kind_of
from pipec_ir.symbolic import (
    HOST_ONLY, FloorDiv, ModularIndexing, bounded_index, contiguous_strides, index_symbol, numel, pyexpr,
)

from .configs import OUTER_PERSISTENT_LIMIT, PERSISTENT_ROW_BYTES, pow2_at_least
from .dtypes import FLOAT_COMPUTE, literal, tl_compute, tl_storage
from .indexing_ops import take_value
from .kernel_source import CodegenError, KernelSource, Scope, writes_clause
from .pointwise_ops import POINTWISE as TEMPLATES
from .reduction_rows import ReductionRows
from . import tiling
from .simplify import simplify_index
from .triton_helpers import helpers_used


_EVICT_LAST = ", eviction_policy='evict_last'"
_L2_MARK = re.compile(r"@l2:(\w+):(\d+)@")  # a looped row's load: @l2:<pointer>:<pass>@, see _l2_hint


def _index(name: str, size) -> sympy.Symbol:
    """The index variable `name` over `size` elements: bounded when the size is static."""
    if size is not None and size.is_Integer:
        return bounded_index(name, int(size))
    return index_symbol(name)


class KernelWriter(ReductionRows):
    """The Triton source of one pointwise or reduction kernel (`write`)."""

    def __init__(self, graph: Graph, kernel: Kernel, persistent_limit: int | None = None,
                 persistent_bytes: int = PERSISTENT_ROW_BYTES, bounds_check: bool = False,
                 tiles: bool = False, tile_split: int | None = None, row_walk: tuple[int, ...] | None = None):
        """`tiles`: a pointwise kernel that reads an input transposed may be written in 2-d tiles,
        and a reduction may walk its rows in its input's memory order (`tiling.py`; codegen
        option `tiled_transposes`), both decided after a first write; `tile_split`: write the
        kernel in tiles, its first `tile_split` kept dims along the tile's rows; `row_walk`: the
        reduced dims (positions in `reduce_dims`) in the order a row is walked, outermost first."""
        self.graph = graph
        self.args = (persistent_limit, persistent_bytes, bounds_check)
        self.tiles = tiles
        self.tile_split = tile_split
        self.load_offsets: list[tuple[str, sympy.Expr]] = []  # (input, offset) of each load, in order
        self.kernel = kernel
        self.bounds_check = bounds_check  # codegen option `bounds_check`: assert every access's range
        self.nodes = graph.node_map()
        self.types: dict[str, TensorType] = graph.types()
        self.in_ptr = {name: f"in_ptr{i}" for i, name in enumerate(kernel.inputs)}
        self.out_ptr = {name: f"out_ptr{i}" for i, name in enumerate(kernel.outputs)}
        self.counter = 0
        self.uses_libdevice = False
        self.reduction_values: dict[str, tuple[str, tuple]] = {}
        self.persistent_limit = persistent_limit
        self.is_reduction = kernel.kind in ("reduction", "scan")  # a kernel of rows: [XBLOCK, RBLOCK] blocks
        domain = tuple(kernel.domain)
        self.domain = domain
        red = set(kernel.reduce_dims)
        self.kept = [d for d in range(len(domain)) if d not in red]
        self.reduced = [d for d in range(len(domain)) if d in red]
        # a tiled kernel: rows over the first `tile_split` kept dims (yindex), columns over the rest
        self.ydims = self.kept[:tile_split] if tile_split else []
        self.xdims = self.kept[tile_split:] if tile_split else self.kept
        self.ynumel = numel([domain[d] for d in self.ydims]) if tile_split else None
        self.xnumel = numel([domain[d] for d in self.xdims])
        self.rnumel = numel([domain[d] for d in self.reduced]) if self.is_reduction else None
        # A static dim's index symbol carries its bound (which drops provably redundant `//`
        # and `%`) in its name (`bounded_index`): symbols over equal bounds mean the same
        # wherever they appear, so kernels may share them.
        self.xsyms = [_index(f"x{k}", domain[d]) for k, d in enumerate(self.kept)]
        self.rsyms = [_index(f"r{k}", domain[d]) for k, d in enumerate(self.reduced)]
        self.row_walk = tuple(row_walk) if row_walk is not None else tuple(range(len(self.reduced)))
        self.names = {s: f"x{k}" for k, s in enumerate(self.xsyms)}
        self.names.update({s: f"r{k}" for k, s in enumerate(self.rsyms)})
        index = [None] * len(domain)
        for s, d in zip(self.xsyms, self.kept):
            index[d] = s
        for s, d in zip(self.rsyms, self.reduced):
            index[d] = s
        # a size-1 dim has only index 0: say so, so that equal reads compare equal
        index = [sympy.Integer(0) if domain[d] == 1 else i for d, i in enumerate(index)]
        self.domain_index = tuple(index)
        self.xindex = _index("xindex", self.xnumel)
        self.rindex = _index("rindex", self.rnumel)
        self.yindex = _index("yindex", self.ynumel) if tile_split else None
        if tile_split:
            self.names[self.yindex] = "yindex"
        self.names[self.xindex] = "xindex"
        self.names[self.rindex] = "rindex"
        # Reducing over non-innermost dims (a column sum): the innermost (contiguous) dim is a
        # kept one, so blocks run wide along x and short along r, and loads stay coalesced.
        self.outer_reduction = self.is_reduction and bool(self.kept) and self.kept[-1] == len(domain) - 1
        self.persistent = self.is_reduction and self._fits_in_registers(persistent_limit, persistent_bytes)
        self.row_passes = 0  # `for roffset` loops opened so far (a looped row's passes over it)
        self.size_symbols: set[sympy.Symbol] = set()
        self.value_params: dict[sympy.Expr, str] = {}  # symbolic `full` values -> int parameters ks0, ...
        self.hoisted: set[sympy.Symbol] = set()  # the symbols standing for those parameters

    def _fits_in_registers(self, limit: int | None, budget: int) -> bool:
        """Whether a whole row is reduced in one pass, held in registers ("persistent").

        A column (non-innermost reduction) is persistent only when short, since its block spans
        many columns: up to OUTER_PERSISTENT_LIMIT rows, fewer if `limit` says so (holding the
        4096-row columns of layer_norm's weight gradient was several times slower than looping:
        docs/performance.md). An innermost row: `limit` (the `persistent_reduction_limit` option) caps its
        length in elements when given; otherwise it is persistent when its power-of-two block of
        every row-level input, as the values the kernel holds (fp32 for half types: 4 bytes at
        least), fits `budget` bytes (128 KiB: one row of 32768 elements, bf16 or fp32, spread
        over up to 32 warps).
        """
        if not self.rnumel.is_Integer:
            return False
        rnumel = int(self.rnumel)
        if self.outer_reduction:
            return rnumel <= (OUTER_PERSISTENT_LIMIT if limit is None else min(limit, OUTER_PERSISTENT_LIMIT))
        if limit is not None:
            return rnumel <= limit
        held = [max(4, ITEMSIZE.get(self.types[i].dtype, 4)) for i in self.kernel.inputs
                if tuple(self.types[i].shape) == self.domain]
        # A row-wide iota (the column numbers a one-hot compares with each row's label: cross
        # entropy's backward) counts as a held row of its dtype: the log-softmax backward over
        # BERT's 30522 words held its row at 680 us and looped at 457 (H200; 318 / 274 with rows
        # padded to 30528), where softmax rows of the same length, without one, gain from being
        # held (docs/performance.md, "Session 10").
        held += [max(4, ITEMSIZE.get(self.types[n].dtype, 4)) for n in self.kernel.nodes
                 if self.nodes[n].op == "iota" and tuple(self.types[n].shape) == self.domain
                 and self.nodes[n].attr("dim") in self.reduced]
        return pow2_at_least(rnumel) * max(sum(held), 4) <= budget

    # ------------------------------------------------------------ helpers

    def fresh(self) -> str:
        self.counter += 1
        return f"tmp{self.counter}"

    def print_index(self, expr) -> str:
        expr = simplify_index(sympy.sympify(expr), self._decompositions())
        expr = self._hoist(expr)
        self.size_symbols |= {s for s in expr.free_symbols if s not in self.names and s not in self.hoisted}
        return pyexpr(expr.xreplace({s: sympy.Symbol(n) for s, n in self.names.items()}))

    def print_size(self, expr) -> str:
        """A size expression (no index variables) as Triton source."""
        expr = self._hoist(sympy.sympify(expr))
        self.size_symbols |= {s for s in expr.free_symbols if s not in self.hoisted}
        return pyexpr(expr)

    def _hoist(self, expr: sympy.Expr) -> sympy.Expr:
        """Size subexpressions Triton cannot spell (Max/Min, from clamped slices; IntSqrt) become
        integer kernel parameters the runtime evaluates."""
        if not expr.has(*HOST_ONLY):
            return expr
        if isinstance(expr, HOST_ONLY) and not (expr.free_symbols & set(self.names)):
            return sympy.Symbol(self._value_param(expr), integer=True, positive=True)  # outermost first
        return expr.func(*[self._hoist(a) for a in expr.args])

    def _decompositions(self):
        """x_k / r_k as functions of the flat xindex / rindex (for simplification)."""
        out = {}
        n_rows = len(self.ydims)
        groups = [(self.xsyms[n_rows:], self.xindex, self.xdims), self.walked_row()]
        if n_rows:
            groups.append((self.xsyms[:n_rows], self.yindex, self.ydims))
        for syms, flat, dims in groups:
            shape = [self.domain[d] for d in dims]
            for k, (s, stride) in enumerate(zip(syms, contiguous_strides(shape))):
                e = FloorDiv(flat, stride)
                out[s] = e if k == 0 else ModularIndexing(e, shape[k])
        return out

    def walked_row(self) -> tuple[list, sympy.Symbol, list]:
        """(the row's index symbols, `rindex`, the reduced dims), in the order a row is walked."""
        return ([self.rsyms[p] for p in self.row_walk], self.rindex, [self.reduced[p] for p in self.row_walk])

    def _has_r(self, exprs) -> bool:
        rs = set(self.rsyms)
        return any(sympy.sympify(e).free_symbols & rs for e in exprs)

    def _has_x(self, exprs) -> bool:
        xs = set(self.xsyms)
        return any(sympy.sympify(e).free_symbols & xs for e in exprs)

    def emit(self, scope: Scope, text: str) -> str:
        var = self.fresh()
        scope.lines.append(f"{scope.indent}{var} = {text}")
        return var

    @property
    def jit(self) -> str:
        """The kernel's decorator: bounds-checked kernels compile in debug mode, where Triton
        keeps `tl.device_assert` (and checks int32 arithmetic for overflow); the runtime runs
        them so in the interpreter too."""
        return "@triton.jit(debug=True)" if self.bounds_check else "@triton.jit"

    def check_bounds(self, scope: Scope, buffer: str, offset: str, mask: str | None, what: str,
                     static=None) -> str:
        """`offset`, after (codegen option `bounds_check`) an assertion that it lies inside
        `buffer` (its numel) wherever `mask` holds: the offset is bound to a variable, asserted,
        and the variable returned for the access. `static`: the offset as a sympy expression,
        when known; a constant one is checked here, at compile time."""
        if not self.bounds_check:
            return offset
        extent = numel(self.types[buffer].shape)
        if static is not None and sympy.sympify(static).is_Integer and extent.is_Integer:
            if not 0 <= int(static) < int(extent):
                raise CodegenError(f"{self.kernel.name}: {what} of {buffer} at {static}, outside its "
                                   f"{extent} elements")
            return offset
        var = self.emit(scope, offset)
        inside = f"({var} >= 0) & ({var} < ({self.print_size(extent)}))"
        cond = f"({inside}) | ~({mask})" if mask else inside
        scope.lines.append(f'{scope.indent}tl.device_assert({cond}, "{self.kernel.name}: {what} of {buffer} '
                           'out of bounds")')
        return var

    # ------------------------------------------------------------ evaluation

    def value(self, name: str, index: tuple) -> tuple[str, bool]:
        """(source name of `name` evaluated at `index`, whether it lives in the inner scope)."""
        index = tuple(sympy.sympify(i) for i in index)
        key = (name, index)
        if self.inner is not None and key in self.inner.cache:
            return self.inner.cache[key], True
        if key in self.outer.cache:
            return self.outer.cache[key], False
        var, inner = self._compute(name, index)
        (self.inner if inner else self.outer).cache[key] = var
        return var, inner

    def _scope(self, inner: bool) -> Scope:
        if inner and self.inner is None:
            raise CodegenError(f"{self.kernel.name}: row-level value needed outside a row loop")
        return self.inner if inner else self.outer

    def _compute(self, name: str, index: tuple) -> tuple[str, bool]:
        if name in self.in_ptr:
            return self._load(name, index)
        node = self.nodes.get(name)
        if node is None:
            raise CodegenError(f"{self.kernel.name}: reads {name!r}, which is neither computed here nor an input")
        kind = kind_of(node.op)
        if kind == VIEW:
            src = node.inputs[0]
            return self.value(src, view_source_index(node, index, self.types[src]))
        if kind == CREATION:
            return self._creation(node, index)
        if kind == REDUCTION:
            if name not in self.reduction_values:
                raise CodegenError(f"{self.kernel.name}: reduction {name} read before it is computed")
            var, expected = self.reduction_values[name]
            if tuple(index) != tuple(expected):
                raise CodegenError(f"{self.kernel.name}: {name} is read at another row ({index} vs {expected})")
            return var, False
        if node.op == "take":  # a load at a computed position (indexing_ops.py)
            return take_value(self, node, index)
        if kind != POINTWISE:
            raise CodegenError(f"{self.kernel.name}: cannot generate {node.op} ({name}) inside a kernel")
        return self._pointwise(node, index)

    def _pointwise(self, node, index):
        if node.op == "pow":
            special = self._pow_special(node, index)
            if special is not None:
                return special
        operands = [self.value(i, index) for i in node.inputs]
        inner = any(inn for _, inn in operands)
        template = TEMPLATES.get(node.op)
        if template is None:
            raise CodegenError(f"{self.kernel.name}: no Triton template for pointwise op {node.op}")
        text = template(node, *[v for v, _ in operands])
        if "libdevice." in text:
            self.uses_libdevice = True
        return self.emit(self._scope(inner), text), inner

    def _pow_special(self, node, index):
        """x ** c for small constant c without libdevice (exact, and interpreter-friendly)."""
        exp_node = self.nodes.get(node.inputs[1])
        if exp_node is None or exp_node.op != "full":
            return None
        c = exp_node.attr("value")
        base, inner = self.value(node.inputs[0], index)
        forms = {2: f"{base} * {base}", 3: f"{base} * {base} * {base}", 1: base, 0.5: f"tl.sqrt({base})",
                 -1: f"1.0 / {base}", -0.5: f"tl.rsqrt({base})", 4: f"({base} * {base}) * ({base} * {base})"}
        if isinstance(c, bool) or c not in forms:
            return None
        if c == 0.5 and node.type.dtype not in FLOAT_COMPUTE:
            return None
        return self.emit(self._scope(inner), forms[c]), inner

    def _value_param(self, expr: sympy.Expr) -> str:
        """A size expression used as a value (a count): an integer kernel parameter the runtime
        evaluates (a bare symbol is passed as itself)."""
        if expr.is_Integer:
            return str(int(expr))
        if expr.is_Symbol:
            self.size_symbols.add(expr)
            return str(expr)
        if expr not in self.value_params:
            name = self.value_params[expr] = f"ks{len(self.value_params)}"
            self.hoisted.add(sympy.Symbol(name, integer=True, positive=True))
        return self.value_params[expr]

    def _block_shape(self, inner: bool) -> str:
        if self.tile_split:
            return "[YBLOCK, XBLOCK]"
        if not self.is_reduction:
            return "[XBLOCK]"
        return "[XBLOCK, RBLOCK]" if inner else "[XBLOCK, 1]"

    def _creation(self, node, index):
        ctype = tl_compute(node.type.dtype)
        if node.op == "full":
            value = node.attr("value")
            lit = self._value_param(value.value) if isinstance(value, Size) else literal(value, node.type.dtype)
            return self.emit(self.outer, f"tl.full({self._block_shape(False)}, {lit}, {ctype})"), False
        # iota: start + step * index[dim]
        expr = node.attr("start") + node.attr("step") * index[node.attr("dim")]
        inner = self._has_r([expr])
        scope = self._scope(inner)
        text = f"(tl.full({self._block_shape(inner)}, 0, tl.int32) + ({self.print_index(expr)})).to({ctype})"
        return self.emit(scope, text), inner

    def _l2_hint(self, name: str, row_level: bool) -> str:
        """The eviction_policy argument of a row-level load in a reduction kernel (else none).

        A persistent row is read once, and asks the L2 to evict it last. Measured, not modelled
        (docs/performance.md, "Row loads ask the L2 to keep them"): with it layer_norm and softmax
        reach the speed of a copy. The DRAM bytes are the same either way (ncu); the gain shows when the
        L2 starts full of dirty lines written by the kernel before, which is how a kernel runs
        inside a model. The kernel after it does not pay: a matmul, a layer_norm or a copy reading
        the output ran as fast or faster as a pair. A pointwise chain gained nothing measurable.

        A looped row is read once per pass over it: every pass but the last one that reads an
        input keeps its lines (evict_last), so the next pass may find them in the L2; the last
        read takes the default (faster for every looped row measured: docs/performance.md).
        Which pass is the last is known only once every pass is written, so the load carries a
        mark that `_resolve_l2_marks` replaces.
        """
        if self.kernel.kind != "reduction" or not row_level:
            return ""
        if self.persistent:
            return _EVICT_LAST
        return f"@l2:{self.in_ptr[name]}:{self.row_passes}@"

    def _resolve_l2_marks(self, lines: list[str]) -> list[str]:
        """The kernel's lines with each looped load's mark made its eviction_policy argument."""
        marks = {m.groups() for line in lines for m in _L2_MARK.finditer(line)}
        last = {}
        for ptr, row_pass in marks:
            last[ptr] = max(last.get(ptr, -1), int(row_pass))
        return [_L2_MARK.sub(lambda m: _EVICT_LAST if int(m.group(2)) < last[m.group(1)] else "", line)
                for line in lines]

    def _load(self, name, index):
        t = self.types[name]
        offset = sum((i * s for i, s in zip(index, contiguous_strides(t.shape))), sympy.Integer(0))
        self.load_offsets.append((name, offset))
        has_x, has_r = self._has_x([offset]), self._has_r([offset])
        masks = [m for m, used in (("xmask", has_x), ("rmask", has_r)) if used]
        if self.tile_split and has_x:  # the mask of the tile's axes this load's offset varies along
            masks = [tiling.load_mask(offset, self.xsyms[:len(self.ydims)], self.xsyms[len(self.ydims):])]
        if self.is_reduction and has_x and not has_r:
            masks = ["xmask"]
        scope = self._scope(has_r)
        mask = f", mask={' & '.join(masks)}, other=0" if masks else ""
        where = self.check_bounds(scope, name, self.print_index(offset), " & ".join(masks), "load", offset)
        text = f"tl.load({self.in_ptr[name]} + ({where}){mask}{self._l2_hint(name, has_r)})"
        if t.dtype in ("float16", "bfloat16"):
            text += ".to(tl.float32)"
        if not masks:  # one element for every point: broadcast it, values are always blocks
            text = f"tl.broadcast_to({text}, {self._block_shape(False)})"
        return self.emit(scope, text), has_r

    # ------------------------------------------------------------ kernels

    def write(self) -> KernelSource:
        body = self._resolve_l2_marks(self._write_body())
        if self.tiles and self.kernel.kind == "pointwise" and self.tile_split is None:
            split = tiling.tile_split(self)
            if split is not None:  # a transposing read: written again in 2-d tiles
                return type(self)(self.graph, self.kernel, *self.args, tile_split=split).write()
        if self.tiles and self.kernel.kind == "reduction" and self.row_walk == tuple(range(len(self.reduced))):
            walk = tiling.row_walk(self)
            if walk is not None:  # rows read across their innermost dim: walked in memory order
                return type(self)(self.graph, self.kernel, *self.args, row_walk=walk).write()
        params = [*self.in_ptr.values(), *self.out_ptr.values(), "xnumel"]
        sizes = [("xnumel", self.xnumel)]
        if self.tile_split:
            params.insert(len(params) - 1, "ynumel")
            sizes.insert(0, ("ynumel", self.ynumel))
        if self.is_reduction:
            params.append("rnumel")
            sizes.append(("rnumel", self.rnumel))
        self.append_scalar_params(params, sizes)
        params += (["YBLOCK: tl.constexpr"] if self.tile_split else []) + ["XBLOCK: tl.constexpr"] \
            + (["RBLOCK: tl.constexpr"] if self.is_reduction else [])
        header = ["import triton", "import triton.language as tl"]
        if self.uses_libdevice:
            header.append("from triton.language.extra import libdevice")
        doc = self._docstring()
        src = "\n".join(header) + "\n" + self._helpers(body) + f"\n\n{self.jit}\n"
        src += f"def {self.kernel.name}({', '.join(params)}):\n"
        src += f'    """{doc}"""\n'
        src += "\n".join(body) + "\n"
        return KernelSource(src, tuple(sizes), self.uses_libdevice, self.persistent, self.rnumel,
                            self.outer_reduction)

    def _write_body(self) -> list[str]:
        """The kernel's lines after its signature (scan.ScanWriter walks rows its own way)."""
        return self._write_reduction() if self.is_reduction else self._write_pointwise()

    def _helpers(self, body: list[str]) -> str:
        """The helper functions this kernel calls (and only those)."""
        return helpers_used(body)

    def _docstring(self) -> str:
        ops = [self.nodes[n].op for n in self.kernel.nodes if kind_of(self.nodes[n].op) != VIEW]
        dom = ", ".join(map(str, self.domain))
        red = f", reducing dims {list(self.kernel.reduce_dims)}" if self.is_reduction else ""
        return f"{' -> '.join(ops)} over [{dom}]{red}{writes_clause(self.kernel.outputs)}"

    def _define_indices(self, scope: Scope, syms, dims, flat: str):
        shape = [self.domain[d] for d in dims]
        for k, (s, stride) in enumerate(zip(syms, contiguous_strides(shape))):
            e = f"{flat} // ({self.print_size(stride)})" if stride != 1 else flat
            if k > 0:
                e = f"({e}) % ({self.print_size(shape[k])})"
            scope.lines.append(f"{scope.indent}{self.names[s]} = {e}")

    def append_scalar_params(self, params: list, sizes: list) -> None:
        """The integer kernel parameters after the pointers: size symbols the kernel reads,
        then symbolic values it takes as arguments (each also a (name, expr) in `sizes`)."""
        for s in sorted(self.size_symbols, key=str):
            params.append(str(s))
            sizes.append((str(s), s))
        for expr, name in self.value_params.items():
            params.append(name)
            sizes.append((name, expr))

    @staticmethod
    def _mask(name: str, index: str, param: str, numel: sympy.Expr, block: str, shape: str) -> str:
        """The line defining mask `name` (`index < param`, of block `shape`). Where `numel` is
        static, the mask is an all-true constant whenever `block` divides it: Triton then drops
        it from every load, store and `tl.where` (no predicates, no selects). The block size is
        the autotuner's pick, so the test is on the constexpr, inside the kernel."""
        test = f"{index} < {param}"
        if not numel.is_Integer or int(numel) == 0:  # 0 % BLOCK == 0, but an empty row has no element 0
            return f"    {name} = {test}"
        return f"    {name} = tl.full({shape}, True, tl.int1) if {int(numel)} % {block} == 0 else {test}"

    def _store(self, scope: Scope, name: str, value: str, offset: str, mask: str):
        dtype = self.types[name].dtype
        offset = self.check_bounds(scope, name, offset, mask, "store")
        scope.lines.append(
            f"{scope.indent}tl.store({self.out_ptr[name]} + ({offset}), {value}.to({tl_storage(dtype)}), {mask})"
        )

    def _write_pointwise(self) -> list[str]:
        self.outer = Scope([], inner=False, indent="    ")
        self.inner = None
        lines = self.outer.lines
        if self.tile_split:
            lines += tiling.tile_lines(self)
            n_rows = len(self.ydims)
            self._define_indices(self.outer, self.xsyms[:n_rows], self.ydims, "yindex")
            self._define_indices(self.outer, self.xsyms[n_rows:], self.xdims, "xindex")
            at, mask = f"yindex * ({self.print_size(self.xnumel)}) + xindex", tiling.TILE_MASK
        else:
            lines += ["    xoffset = tl.program_id(0) * XBLOCK",
                      "    xindex = xoffset + tl.arange(0, XBLOCK)",
                      self._mask("xmask", "xindex", "xnumel", self.xnumel, "XBLOCK", "[XBLOCK]")]
            self._define_indices(self.outer, self.xsyms, self.kept, "xindex")
            at, mask = "xindex", "xmask"
        # every value first, then the stores: each load precedes every store, which is what lets
        # the memory plan write an output over an input in place (memory_plan.inplace_candidates)
        values = [(out, self._pointwise_output(out)) for out in self.kernel.outputs]
        for out, value in values:
            self._store(self.outer, out, value, at, mask)
        return lines

    def _pointwise_output(self, out: str) -> str:
        """The value a pointwise kernel stores for output `out` at the domain index."""
        var, _ = self.value(out, self.domain_index)
        if tuple(self.types[out].shape) != self.domain:
            raise CodegenError(f"{self.kernel.name}: output {out} does not have the kernel's domain shape")
        return var

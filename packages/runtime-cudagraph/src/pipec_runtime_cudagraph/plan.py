"""Load-time planning of a Program: the value index, the size symbols and where each is read,
the inputs' dtypes and shapes, the allocations (one storage per memory-plan slot) and the
release points (a value dies after its last use). `ProgramRunner` (runner.py) is a `ProgramPlan`.
"""

from __future__ import annotations

import sympy

from pipec_ir import BUCKET_POLICIES, Program, Size, bucket_of, get_attr, ref_names

from .exprs import compile_ints, is_static, static_ints
from .memory import buffer_nbytes, plan_check
from .steps import TORCH_DTYPES, ProgramLoadError


class ProgramPlan:
    """What a Program's steps need to run, computed once at load time."""

    def __init__(self, program: Program, bucket_policy: str = "pow2"):
        self.program = program
        self.name = program.name
        self.bucket_policy = bucket_policy
        if self.bucket_policy not in BUCKET_POLICIES:
            raise ProgramLoadError(f"unknown bucket policy {self.bucket_policy!r} "
                                   f"(expected one of: {', '.join(BUCKET_POLICIES)})")
        plan_check(program)

        # every value gets an index into the per-call list `vals`
        names: list[str] = [b.name for b in program.inputs]
        for b in program.buffers:
            names.append(b.name)
        for s in program.steps:
            names.extend(s.outputs)
        self.index: dict[str, int] = {}
        for n in names:
            self.index.setdefault(n, len(self.index))
        self.nvals = len(self.index)
        self.buffers = {b.name: b for b in program.buffers}
        self.kernels = program.kernel_map()

        self._bind_symbols()
        self._plan_inputs()
        self._plan_allocations()
        self._plan_release()
        self.out_index = tuple(None if o is None else self.index[o] for o in program.outputs)
        # (input position, value index) per written input (Program.writes): `apply_writes`
        position = {b.name: k for k, b in enumerate(program.inputs)}
        self.write_index = tuple((position[target], self.index[value]) for target, value in program.writes)
        types = {b.name: b.type for b in (*program.inputs, *program.buffers)}
        self.output_shapes = tuple(None if o is None or o not in types else self.shape_fn(types[o].shape)
                                   for o in program.outputs)
        self.value_dtypes = {self.index[b.name]: TORCH_DTYPES[b.type.dtype]
                             for b in (*program.inputs, *program.buffers) if b.type.dtype in TORCH_DTYPES}

    def _bind_symbols(self) -> None:
        """Each size symbol is read from the first input dimension that is exactly it."""
        program = self.program
        symbols: dict[str, tuple[int, int]] = {}
        for i, b in enumerate(program.inputs):
            for d, e in enumerate(b.type.shape):
                e = sympy.sympify(e)
                if e.is_Symbol and e.name not in symbols:
                    symbols[e.name] = (i, d)
        used: set[str] = set()
        for b in (*program.inputs, *program.buffers):
            for e in b.type.shape:
                used |= {s.name for s in sympy.sympify(e).free_symbols}
        for k in program.kernels:
            for _, e in k.sizes:
                used |= {s.name for s in sympy.sympify(e).free_symbols}
            for e, _ in k.grid:
                used |= {s.name for s in sympy.sympify(e).free_symbols}
        for s in program.slots:
            used |= {x.name for x in sympy.sympify(s.nbytes).free_symbols}
        for st in program.steps:
            for _, v in st.attrs:
                used |= _size_symbols(v)
        unbound = sorted(used - set(symbols))
        if unbound:
            raise ProgramLoadError(
                f"program {program.name}: size symbol(s) {', '.join(unbound)} are not the size of any input dimension")
        self.symbols = tuple(sorted(symbols))
        self.symbol_source = tuple(symbols[s] for s in self.symbols)
        ranges = {r.name: r for r in program.symbols}
        self.symbol_ranges = tuple((ranges[s].lower, ranges[s].upper) if s in ranges else (None, None)
                                   for s in self.symbols)

    def bucket_key(self, symvals, indices=None) -> tuple:
        """The size bucket of symbol values (all symbols, or those at `indices`), by the
        `bucket` option: "pow2" (next power of two, capped at the symbol's upper bound) or "exact"."""
        if indices is None:
            indices = range(len(self.symbols))
        return tuple(bucket_of(symvals[i], self.bucket_policy, self.symbol_ranges[i][1]) for i in indices)

    def shape_fn(self, shape):
        if is_static(shape):
            shape = static_ints(shape)
            return lambda *symvals: shape
        return compile_ints(shape, self.symbols)

    def _plan_inputs(self) -> None:
        self.input_dtypes = tuple(TORCH_DTYPES[b.type.dtype] for b in self.program.inputs)
        self.input_shapes = tuple(self.shape_fn(b.type.shape) for b in self.program.inputs)
        self.static_shapes = not self.symbols
        # The inputs a kernel reads or writes, as dense row-major memory: `prepare` makes them
        # contiguous. The others reach only library calls and views (a backward graph's saved
        # transposed weights, attention's q, k and v), which take any strides: they pass as the
        # caller's tensors, as in eager, instead of being copied every call.
        touched = {n for s in self.program.steps if s.kind == "launch" for n in (*s.inputs, *s.outputs)}
        touched.update(target for target, _ in self.program.writes)  # a launch may store into it
        self.dense_inputs = frozenset(i for i, b in enumerate(self.program.inputs) if b.name in touched)

    def result_binds(self, step) -> tuple:
        """(output index, library result index, shape function, dtype) of each output `step`
        writes in place of a library call's result (`inplace` naming a value without a slot)."""
        return tuple((self.index[out], self.index[donor], self.shape_fn(self.buffers[out].type.shape),
                      TORCH_DTYPES[self.buffers[out].type.dtype]) for out, donor in self._bind_names(step))

    def _plan_allocations(self) -> None:
        """Buffers written by launch steps: per slot one storage, else one tensor each (none for a
        buffer every launch writing it writes over a library result: `result_binds`)."""
        program = self.program
        inputs = {b.name for b in program.inputs}
        self._input_names = inputs
        bound_by: dict[str, list[bool]] = {}
        for s in program.steps:
            if s.kind == "launch":
                over = {out for out, _ in self._bind_names(s)}
                for o in s.outputs:
                    bound_by.setdefault(o, []).append(o in over)
        written: list[str] = []
        for s in program.steps:
            if s.kind == "launch":
                for o in s.outputs:
                    if all(bound_by.get(o, [False])):
                        continue
                    if o not in inputs and o not in written:
                        if o not in self.buffers:
                            raise ProgramLoadError(f"program {program.name}: launch of {s.target} writes "
                                                   f"{o!r}, which is not a declared buffer")
                        written.append(o)
        self.allocated = frozenset(self.index[n] for n in written)
        slots = {s.index: s for s in program.slots}
        by_slot: dict[int, list] = {}
        self.plain_allocs = []
        for name in written:
            b = self.buffers[name]
            if b.slot is None:
                self.plain_allocs.append((self.index[name], self.shape_fn(b.type.shape), TORCH_DTYPES[b.type.dtype]))
            else:
                by_slot.setdefault(b.slot, []).append(b)
        self.slot_allocs = []
        for slot, bufs in sorted(by_slot.items()):
            sizes = [slots[slot].nbytes] + [buffer_nbytes(b) for b in bufs]
            nbytes = self.shape_fn(sizes)
            views = tuple((self.index[b.name], TORCH_DTYPES[b.type.dtype], self.shape_fn(b.type.shape),
                           self.shape_fn([buffer_nbytes(b)])) for b in bufs)
            self.slot_allocs.append((nbytes, views))

    def _bind_names(self, step) -> list[tuple[str, str]]:
        """(output, library result) pairs of a launch's `inplace` whose input has no slot."""
        if step.kind != "launch":
            return []
        names = []
        written = {target for target, _ in self.program.writes}
        for out, donor in tuple(get_attr(step.attrs, "inplace", ()) or ()):
            if out not in self.buffers:
                continue
            if donor in written:  # a written input's value, stored into the input itself
                names.append((out, donor))
                continue
            d = self.buffers.get(donor)
            if d is not None and d.slot is None and donor not in self._input_names:
                names.append((out, donor))
        return names

    def _plan_release(self) -> None:
        """After step k, drop the values whose last use is step k (not outputs, not inputs)."""
        program = self.program
        keep = ({o for o in program.outputs if o is not None} | {b.name for b in program.inputs}
                | {value for _, value in program.writes})  # written into its input after the run
        last: dict[str, int] = {}
        for k, s in enumerate(program.steps):
            for n in (*s.inputs, *s.outputs):
                last[n] = k
            for _, v in s.attrs:
                for ref in ref_names(v):
                    last[ref] = k
        release: list[list[int]] = [[] for _ in program.steps]
        for n, k in last.items():
            if n not in keep and n in self.index:
                release[k].append(self.index[n])
        self.release = [tuple(r) for r in release]


def _size_symbols(value) -> set[str]:
    if isinstance(value, Size):
        return {s.name for s in value.value.free_symbols}
    if isinstance(value, tuple):
        return set().union(*(_size_symbols(v) for v in value)) if value else set()
    return set()



__all__ = ["ProgramPlan"]

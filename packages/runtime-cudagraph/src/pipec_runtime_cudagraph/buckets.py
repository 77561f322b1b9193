"""Size buckets for CUDA Graphs: which symbol values a graph is recorded at, padding the
inputs up to them and slicing the outputs back, and the graph table with its budget.

A program records one CUDA Graph per *graph key*: the symbol values it is recorded
at. For a symbol in `Program.pad_symbols` (codegen proved that padding the inputs
along it cannot change the real part of any output) the key holds the symbol's
bucket under the `bucket` option ("pow2": the next power of two, capped at the
symbol's upper bound); every other symbol is keyed by its exact value. A call whose
sizes fall in a recorded bucket copies its inputs into the prefix of the graph's
(larger) static inputs, replays, and returns the prefix of each output.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pipec_ir import DEFAULT_RECOMPILE_LIMIT, CompileOptions, LoadContext, RecompileBudget, bucket_of


class PadPolicy:
    """Graph keys and input padding for one `ProgramRunner`."""

    def __init__(self, runner, policy: str = "pow2"):
        self.runner = runner
        self.policy = policy
        pad = set(runner.program.pad_symbols) if policy == "pow2" else set()
        self.pad_index = tuple(i for i, s in enumerate(runner.symbols) if s in pad)

    def graph_values(self, symvals: tuple) -> tuple:
        """The symbol values a graph serving `symvals` is recorded at."""
        if not self.pad_index:
            return tuple(symvals)
        vals = list(symvals)
        for i in self.pad_index:
            vals[i] = bucket_of(symvals[i], self.policy, self.runner.symbol_ranges[i][1])
        return tuple(vals)

    def padded_inputs(self, inputs: list, graph_values: tuple) -> list:
        """Fresh contiguous copies of `inputs` at the graph's sizes (zeros beyond the real prefix)."""
        return [self.padded_input(i, t, graph_values) for i, t in enumerate(inputs)]

    def padded_input(self, index: int, t, graph_values: tuple):
        """A fresh contiguous copy of input `index` (`t`) at the graph's sizes (zeros beyond its prefix)."""
        buf = self.input_buffer(index, t, graph_values)
        self.fill_buffer(buf, t)
        return buf

    def input_buffer(self, index: int, t, graph_values: tuple):
        """An uninitialized contiguous tensor for input `index` (`t`) at the graph's sizes: a graph's
        own input buffer, made inside its capture (in its memory pool; `torch.empty` launches
        nothing) and filled by `fill_buffer` after it."""
        shape = tuple(self.runner.input_shapes[index](*graph_values))
        return torch.empty(shape, dtype=t.dtype, device=t.device)

    @staticmethod
    def fill_buffer(buf, t) -> None:
        """`t` copied into its buffer `buf`, zeros beyond its prefix."""
        if buf.shape != t.shape:
            buf.zero_()
        copy_input(buf, t)

    @staticmethod
    def copy_inputs(static_inputs: list, inputs: list) -> None:
        """Copy a call's inputs into a graph's static inputs (into their prefix when padded)."""
        for static, t in zip(static_inputs, inputs):
            copy_input(static, t)

    def real_outputs(self, outputs: list, symvals: tuple, graph_values: tuple) -> list:
        """The real prefix of each output of a run at `graph_values` (views, not copies)."""
        if tuple(symvals) == tuple(graph_values):
            return list(outputs)
        views: dict[tuple, torch.Tensor] = {}
        result = []
        for t, shape_fn in zip(outputs, self.runner.output_shapes):
            if t is None or shape_fn is None:
                result.append(t)
                continue
            shape = tuple(shape_fn(*symvals))
            key = (id(t), shape)
            if key not in views:
                views[key] = t if tuple(t.shape) == shape else t[prefix_slices(shape)]
            result.append(views[key])
        return result

    def run_padded(self, inputs: list, symvals: tuple, device) -> list:
        """Run the program the way a replay does (padded to the graph's sizes), without a graph."""
        values = self.graph_values(symvals)
        outputs = self.runner.run(self.padded_inputs(inputs, values), values, device)
        return [None if t is None else t.clone() for t in self.real_outputs(outputs, symvals, values)]


def copy_input(static, t) -> None:
    """Copy `t` into a graph's input buffer `static` (into its prefix when the graph is padded),
    unless `t` is that buffer."""
    if static.shape != t.shape:
        static[prefix_slices(t.shape)].copy_(t)
    elif static.data_ptr() != t.data_ptr():
        static.copy_(t)


def prefix_slices(shape) -> tuple:
    return tuple(slice(0, int(n)) for n in shape)


class GraphTable:
    """Recorded graphs by key. A program's first record is free; each later one (a re-record
    for a new size bucket) is charged to the recompile budget, and a refused key runs as plain
    launches."""

    def __init__(self, budget: RecompileBudget, name: str):
        self.budget = budget
        self.name = name
        self.entries: dict[tuple, object] = {}
        self.records = 0

    def get(self, key):
        return self.entries.get(key)

    def record(self, key, make: Callable[[], object | None]):
        """The entry for `key`, recording it with `make()` if the budget allows (else None)."""
        entry = self.entries.get(key)
        if entry is not None:
            return entry
        if self.records and not self.budget.charge(
                f"CUDA Graph re-record of program {self.name!r} for sizes {key[-1]}"):
            return None
        self.records += 1
        entry = make()
        if entry is not None:
            self.entries[key] = entry
        return entry

    def __len__(self) -> int:
        return len(self.entries)


def budget_from(context: LoadContext, options: CompileOptions, name: str) -> RecompileBudget:
    """The model's shared recompile budget (`context.budget`), else a private one of the option
    `recompile_limit` (default 8)."""
    if context.budget is not None:
        return context.budget
    return RecompileBudget(options.get("recompile_limit", DEFAULT_RECOMPILE_LIMIT), strict=options.fullgraph,
                           name=name)


__all__ = ["GraphTable", "PadPolicy", "budget_from", "copy_input", "prefix_slices"]

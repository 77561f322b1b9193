"""The ``cudagraph`` runtime: the whole step list captured once into a CUDA Graph.

Per graph key (the size-symbol values a graph is recorded at: the size bucket along
the program's `pad_symbols`, the exact value along the others, see `buckets.py`): one
warm-up run on a side stream (compiles and autotunes the kernels), capture into the
runtime's private memory pool, then replay. Inputs are copied into static input
buffers (into their prefix when the graph was recorded at a larger bucket size;
skipped when the caller passes those very buffers); outputs are clones of (the real
prefix of) the static outputs, safe to keep across calls.

The first graph of a program is free; every later one is a re-record charged to the
model's recompile budget (option `recompile_budget`, shared with Dynamo recompiles;
else a private one of `recompile_limit`, default 8). Past the budget new sizes run as
plain launches (one warning), or raise under fullgraph=True.
Without CUDA, for CPU inputs, or when capture fails, it runs as ``launch`` (with one
warning naming the reason).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch

from pipec_ir import CompileOptions, Program

from .buckets import GraphTable, PadPolicy, budget_from
from .launch import ProgramRunner

NO_CUDA_MESSAGE = "cudagraph runtime: no CUDA device, running as 'launch'"

# Ops whose output size depends on the data: they synchronize with the host, which
# a CUDA Graph capture cannot do. Programs calling them are not captured at all.
HOST_SYNC_TARGETS = frozenset({
    "aten.nonzero.default", "aten.masked_select.default", "aten._unique2.default", "aten.unique_dim.default",
    "aten.unique_consecutive.default", "aten._local_scalar_dense.default", "aten.item.default",
    "aten.repeat_interleave.Tensor", "aten.index.Tensor_bool", "aten.equal.default", "aten.is_nonzero.default",
})


class _Graph:
    __slots__ = ("graph", "static_inputs", "static_outputs")

    def __init__(self, graph, static_inputs, static_outputs):
        self.graph, self.static_inputs, self.static_outputs = graph, static_inputs, static_outputs


class CudaGraphProgram:
    """A loaded Program replayed through CUDA Graphs: `prog(list_of_tensors) -> list`."""

    def __init__(self, program: Program, options: CompileOptions | None = None):
        options = options or CompileOptions()
        self.runner = ProgramRunner(program, options)
        self.name = program.name
        self.padding = PadPolicy(self.runner, self.runner.bucket_policy)
        self.graphs = GraphTable(budget_from(options, program.name), program.name)
        self.pool = torch.cuda.graph_pool_handle()
        self.fallback: str | None = None  # why we run as launch, once capture failed
        sync = [st.target for st in program.steps if st.kind == "extern" and st.target in HOST_SYNC_TARGETS]
        self._not_capturable = f"{sync[0]} synchronizes with the host" if sync else None

    def __call__(self, inputs) -> list:
        runner = self.runner
        inputs, symvals, device = runner.prepare(inputs)
        if self.fallback is not None or device.type != "cuda":
            return runner.run(inputs, symvals, device)
        values = self.padding.graph_values(symvals)
        key = (device.index, values)
        entry = self.graphs.get(key)
        if entry is None:
            entry = self.graphs.record(key, lambda: self._capture(inputs, values, device))
            if entry is None:  # over budget, or capture failed
                return runner.run(inputs, symvals, device)
        self.padding.copy_inputs(entry.static_inputs, inputs)
        entry.graph.replay()
        return _clone_outputs(self.padding.real_outputs(entry.static_outputs, symvals, values))

    def _give_up(self, reason: str) -> None:
        self.fallback = reason
        warnings.warn(f"cudagraph runtime: capturing program {self.name!r} failed ({reason}); "
                      f"running as 'launch'", RuntimeWarning, stacklevel=4)

    def _capture(self, inputs, symvals, device) -> _Graph | None:
        """Record a graph at `symvals` (the graph key's values: inputs padded up to them)."""
        runner = self.runner
        if self._not_capturable:
            self._give_up(self._not_capturable)
            return None
        try:
            with torch.cuda.device(device):
                static_inputs = self.padding.padded_inputs(inputs, symvals)
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(2):  # first run compiles and autotunes, second settles allocations
                        runner.run(static_inputs, symvals, device)
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=self.pool):
                    static_outputs = runner.run(static_inputs, symvals, device)
        except Exception as e:  # noqa: BLE001 - any capture failure falls back to plain launches
            _recover_from_failed_capture(device)
            self._give_up(f"{type(e).__name__}: {e}".splitlines()[0])
            return None
        return _Graph(graph, static_inputs, static_outputs)


def _recover_from_failed_capture(device) -> None:
    """A capture that raised leaves the CUDA RNG generators in capture mode (every later
    `torch.randn` on CUDA fails: "Offset increment outside graph capture"); one empty
    capture runs their epilogue again."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "The CUDA Graph is empty"
        try:
            with torch.cuda.device(device):
                torch.cuda.synchronize()
                with torch.cuda.graph(torch.cuda.CUDAGraph()):
                    pass
        except Exception:  # noqa: BLE001 - best effort
            pass


def _clone_outputs(outputs: list) -> list:
    clones: dict[int, torch.Tensor] = {}
    result = []
    for t in outputs:
        if t is None:
            result.append(None)
            continue
        c = clones.get(id(t))
        if c is None:
            c = clones[id(t)] = t.clone()
        result.append(c)
    return result


def load_cudagraph(program: Program, options: CompileOptions | None = None) -> Callable[[list], list]:
    """The ``cudagraph`` runtime's `load`: CUDA Graph replay on CUDA, else ``launch``."""
    if not torch.cuda.is_available():
        warnings.warn(NO_CUDA_MESSAGE, RuntimeWarning, stacklevel=2)
        return ProgramRunner(program, options)
    return CudaGraphProgram(program, options)


__all__ = ["CudaGraphProgram", "load_cudagraph", "NO_CUDA_MESSAGE"]

"""The ``cudagraph`` runtime: the whole step list captured once into a CUDA Graph.

Per graph key (the size-symbol values a graph is recorded at: the size bucket along
the program's `pad_symbols`, the exact value along the others, see `buckets.py`): one
warm-up run on a side stream (compiles and autotunes the kernels), capture into the
model's memory pool, then replay.

Inputs. A *static* input — an `nn.Parameter`, or a tensor Dynamo marked static
(`_dynamo_static_input_type`) — is captured at its own address and never copied: a
replay reads whatever it holds then (an optimizer's in-place update included). If a
later call passes a static input at another address, the graph is recorded again
(charged to the budget, below) or, past the budget, the call runs as plain launches.
Every other input is copied into the graph's own input buffer (into its prefix when
the graph was recorded at a larger bucket size), unless the caller passes that very
buffer.

Outputs are copies (`clone`) of the graph's static outputs, made right after the
replay: a tensor handed to the caller is never overwritten by a later replay. That
also makes one memory pool per compiled model safe (the forward and backward graphs
of a training step, the graphs of every size bucket): what a graph leaves in the
pool after its replay is read before any other graph of the pool replays.
The pool is shared through the model's recompile budget object (`recompile_budget`
option; `pipec.compile` makes one per model), else one pool per program.

The first graph of a program is free; every later one is a re-record charged to the
model's recompile budget (option `recompile_budget`, shared with Dynamo recompiles;
else a private one of `recompile_limit`, default 8). Past the budget new sizes run as
plain launches (one warning), or raise under fullgraph=True.
Without CUDA, for CPU inputs, or when capture fails (a host sync, out of memory, an op
that cannot be captured), it runs as ``launch``, with one warning naming the reason.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable

import torch

from pipec_ir import CompileOptions, Program

from .buckets import GraphTable, PadPolicy, _prefix, budget_from
from .launch import ProgramRunner
from .specialize import _Source, compile_source, guard_lines

NO_CUDA_MESSAGE = "cudagraph runtime: no CUDA device, running as 'launch'"

# Ops whose output size depends on the data: they synchronize with the host, which
# a CUDA Graph capture cannot do. Programs calling them are not captured at all.
HOST_SYNC_TARGETS = frozenset({
    "aten.nonzero.default", "aten.masked_select.default", "aten._unique2.default", "aten.unique_dim.default",
    "aten.unique_consecutive.default", "aten._local_scalar_dense.default", "aten.item.default",
    "aten.repeat_interleave.Tensor", "aten.index.Tensor_bool", "aten.equal.default", "aten.is_nonzero.default",
})

# recompile budget (one per compiled model) -> the model's CUDA Graph memory pool
_model_pools: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def model_pool(options: CompileOptions):
    """The memory pool shared by every graph of one compiled model (keyed by its budget)."""
    budget = options.get("recompile_budget")
    if budget is None:
        return torch.cuda.graph_pool_handle()
    pool = _model_pools.get(budget)
    if pool is None:
        pool = _model_pools[budget] = torch.cuda.graph_pool_handle()
    return pool


def is_static_input(t: torch.Tensor) -> bool:
    """Captured at its own address: parameters, and tensors Dynamo marked static."""
    return isinstance(t, torch.nn.Parameter) or getattr(t, "_dynamo_static_input_type", None) is not None


class _Graph:
    """One recorded graph: its inputs (static ones are the caller's own tensors), outputs,
    and the addresses the static inputs had."""

    __slots__ = ("graph", "static_inputs", "static_outputs", "pinned")

    def __init__(self, graph, static_inputs, static_outputs, pinned):
        self.graph, self.static_inputs, self.static_outputs = graph, static_inputs, static_outputs
        self.pinned = pinned  # input index -> data_ptr captured at


class CudaGraphProgram:
    """A loaded Program replayed through CUDA Graphs: `prog(list_of_tensors) -> list`."""

    def __init__(self, program: Program, options: CompileOptions | None = None):
        options = options or CompileOptions()
        self.runner = ProgramRunner(program, options)
        self.runner.choice_timer = "graph"  # replays pay no host time: choices go by GPU time
        self.name = program.name
        self.padding = PadPolicy(self.runner, self.runner.bucket_policy)
        self.graphs = GraphTable(budget_from(options, program.name), program.name)
        self.options = options
        self._pool = None  # taken at the first capture
        self.fallback: str | None = None  # why we run as launch, once capture failed
        self.replays: dict[tuple, Callable] = {}  # exact symbol values -> generated replay
        sync = [st.target for st in program.steps if st.kind == "extern" and st.target in HOST_SYNC_TARGETS]
        self._not_capturable = f"{sync[0]} synchronizes with the host" if sync else None

    def __call__(self, inputs) -> list:
        if self.replays:
            try:
                symvals = tuple([inputs[i].shape[d] for i, d in self.runner.symbol_source])
            except (IndexError, AttributeError, TypeError):
                symvals = None
            replay = self.replays.get(symvals)
            if replay is not None:
                out = replay(inputs)
                if out is not None:
                    return out
        return self._call(inputs)

    def _call(self, inputs) -> list:
        """The general path: check the inputs, record a graph when needed, replay."""
        runner = self.runner
        if self.fallback is not None:
            return runner(inputs)
        inputs, symvals, device = runner.prepare(inputs)
        if device.type != "cuda":
            return runner.run(inputs, symvals, device)
        values = self.padding.graph_values(symvals)
        key = (device.index, values)
        entry = self.graphs.get(key)
        if entry is not None and any(inputs[i].data_ptr() != p for i, p in entry.pinned.items()):
            # a static input moved: record again (charged), at the new addresses
            self.graphs.entries.pop(key)
            self.replays.clear()
            entry = None
        if entry is None:
            entry = self.graphs.record(key, lambda: self._capture(inputs, values, device))
            if entry is None:  # over budget, or capture failed
                return runner.run(inputs, symvals, device)
        self.padding.copy_inputs(entry.static_inputs, inputs)
        entry.graph.replay()
        out = _clone_outputs(self.padding.real_outputs(entry.static_outputs, symvals, values))
        if device.index == torch.cuda.current_device():
            self.replays[symvals] = self._build_replay(entry, symvals, values, device)
        return out

    def _give_up(self, reason: str) -> None:
        self.fallback = reason
        self.replays.clear()
        warnings.warn(f"cudagraph runtime: capturing program {self.name!r} failed ({reason}); "
                      f"running as 'launch'", RuntimeWarning, stacklevel=5)

    def _capture(self, inputs, symvals, device) -> _Graph | None:
        """Record a graph at `symvals` (the graph key's values: inputs padded up to them)."""
        runner = self.runner
        if self._not_capturable:
            self._give_up(self._not_capturable)
            return None
        try:
            with torch.cuda.device(device):
                static_inputs = self.padding.padded_inputs(inputs, symvals)
                pinned = {}
                for i, t in enumerate(inputs):
                    if is_static_input(t) and t.shape == static_inputs[i].shape and t.is_contiguous():
                        static_inputs[i] = t  # captured at its own address: never copied
                        pinned[i] = t.data_ptr()
                stream = torch.cuda.Stream()
                stream.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(stream):
                    for _ in range(2):  # first run compiles and autotunes, second settles allocations
                        runner.run(static_inputs, symvals, device)
                torch.cuda.current_stream().wait_stream(stream)
                graph = torch.cuda.CUDAGraph()
                if self._pool is None:
                    self._pool = model_pool(self.options)
                with torch.cuda.graph(graph, pool=self._pool):
                    static_outputs = runner.run(static_inputs, symvals, device)
        except Exception as e:  # noqa: BLE001 - any capture failure falls back to plain launches
            _recover_from_failed_capture(device)
            self._give_up(f"{type(e).__name__}: {e}".splitlines()[0])
            return None
        return _Graph(graph, static_inputs, static_outputs, pinned)

    def _build_replay(self, entry: _Graph, symvals: tuple, values: tuple, device):
        """`replay(inputs) -> outputs | None` for calls at exactly `symvals`: the guards,
        the pinned-address checks, the input copies, the replay and the output clones as one
        generated function (None: take the general path)."""
        runner = self.runner
        src = _Source()
        names = [f"x{i}" for i in range(len(runner.program.inputs))]
        lines = guard_lines(src, runner, symvals, device.index, names, "replay(inputs)")
        if entry.pinned:
            moved = " or ".join(f"x{i}.data_ptr() != {p}" for i, p in entry.pinned.items())
            lines.append(f"    if {moved}: return None")
        for i, static in enumerate(entry.static_inputs):
            if i in entry.pinned:
                continue
            buf = src.const("IN", static)
            if tuple(static.shape) == tuple(runner.input_shapes[i](*symvals)):
                lines.append(f"    if x{i}.data_ptr() != {static.data_ptr()}: {buf}.copy_(x{i})")
            else:  # the graph was recorded at a larger bucket: copy into the prefix
                view = src.const("IN", static[_prefix(runner.input_shapes[i](*symvals))])
                lines.append(f"    {view}.copy_(x{i})")
        lines.append(f"    {src.const('REPLAY', entry.graph.replay)}()")
        real = self.padding.real_outputs(entry.static_outputs, symvals, values)
        seen: dict[int, str] = {}
        outs = []
        for t in real:
            if t is None:
                outs.append("None")
                continue
            if id(t) not in seen:
                seen[id(t)] = f"o{len(seen)}"
                lines.append(f"    {seen[id(t)]} = {src.const('OUT', t)}.clone()")
            outs.append(seen[id(t)])
        lines.append(f"    return [{', '.join(outs)}]")
        return compile_source(lines, src.namespace, f"<pipec replay {self.name} {symvals}>")


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


__all__ = ["CudaGraphProgram", "load_cudagraph", "model_pool", "is_static_input", "NO_CUDA_MESSAGE"]

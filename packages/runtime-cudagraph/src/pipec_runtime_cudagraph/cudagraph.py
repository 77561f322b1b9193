"""The ``cudagraph`` runtime: the whole step list captured into CUDA Graphs and replayed.

Graph keys. A graph is recorded per *graph key*: the size-symbol values it runs at (the size
bucket along the program's `pad_symbols`, the exact value along the others, see `buckets.py`).
A program's first key is free; each later one is charged to the model's recompile budget
(the `LoadContext`'s `budget`, shared with Dynamo recompiles; else a private one of
`recompile_limit`, default 8). Past the budget new sizes run as plain launches (one warning),
or raise under fullgraph=True. A key holds a few recorded graphs of the same computation
("variants"), which differ in where they read their inputs and write their outputs.

Inputs. A variant reads each input either
* in place ("pinned"): the graph reads the caller's memory at the address it was recorded
  at, and a call passing a tensor at that address, with those strides, copies nothing. Pinned
  are static inputs (`nn.Parameter`s, tensors Dynamo marked static: an optimizer's in-place
  update is seen by the next replay), inputs at the same address as in the previous call of
  the key (a model called again on the same tensors, a buffer the caller refills in place),
  and outputs of another pipec graph (a training step's saved activations read by its
  backward graph, the tensors passed across a graph break), whose addresses are stable.
  Nothing of a pinned tensor is kept but its address: a replay happens only for a call that
  passes a tensor at that address, so the memory the graph reads is that tensor's.
* or from a buffer of its own, which the call's tensor is copied into (into its prefix when the
  graph was recorded at a larger bucket), unless the call passes that very buffer. Buffers are
  made inside the capture, in the graph's pool, and filled after it: a record allocates nothing
  in the caller's memory, whose allocator a decoder's next static cache then finds as the last
  one left it (Inductor's graphs keep their inputs in their pool too). On an H100, Llama-1B's
  cache moved at most `generate`s while buffers were the caller's, each move a record; since,
  it comes back to the same addresses every time, as under Inductor, and nothing is recorded
  after the first generate. (GPT-2's can still move: transformers allocates each layer's cache
  inside the eager prefill, among the prefill's own temporaries.)
A call whose input would be copied although it stayed where it was in the previous call
records a variant that pins it; a call whose pinned address moved takes another variant or
records one (at most MAX_RECORDS per key; past that, inputs are copied). A *static* input that
moved re-records past MAX_RECORDS too, replacing a variant whose outputs the caller no longer
holds, when the static input that variant pins is gone or the call's static inputs sit where no
record of the key found them before: transformers makes a new static KV cache (tensors marked
static) for every `generate`, so each generate's first decoding step records once and the rest
replay; copying the cache in and back instead would cost two copies of it a step. A shared
record first drops the variants whose static inputs are gone (earlier generates' caches), whose
pools hold memory no call needs. Static sets
that take turns, all alive (modules sharing one compiled graph), are no new cache: they go on as
other moved inputs do. At most MAX_STATIC_MOVES such re-records per key (the limit Inductor's
CUDA Graph trees set for theirs); past it, calls whose static inputs moved run as plain launches,
with one warning. The variants themselves, and what a call brings to the choice, are in
variants.py.

Outputs are not copied: the caller gets aliases (`detach()`) of the graph's own output memory.
A variant replays only when the caller holds nothing of its previous outputs: the use count
of each output storage (every tensor and view on it counts) is back to what the runtime
holds itself, the check Inductor's CUDA Graph trees make. Outputs of one element (a loss,
which a training loop keeps in a list) are cloned: that costs nothing and keeps the graph free. A loop `y = model(x)` still holds
the last `y` during the next call, so a key alternates between two variants (MAX_SHARED):
twice the memory, no copy. When the caller holds the outputs of both (it keeps outputs in a
list), the call replays a *private* variant whose outputs are cloned, with one warning naming
the trade-off; past MAX_PRIVATE of those records, it runs as plain launches.

Memory pools and capture. Every graph has a memory pool of its own. A replay writes memory
its capture freed again (intermediates, the cuBLAS workspace); in a pool shared with other
graphs, a graph recorded later can hold its outputs there, which the caller now keeps. The
one exception is a record that replaces a dropped variant (a new static cache): it captures
in the dropped graph's pool, which is safe because that graph never replays again, and keeps
a decoder's memory at one pool across `generate`s. A record at a key recorded before runs no
warm-up (the kernels are compiled and tuned): its capture runs only the specialized run built
for those sizes, and one whose guards fail, or a capture that fails, warms up once and captures
again. A key's first record warms up twice: the first run (which compiles and tunes) on the
caller's stream and memory, as a plain call, and the last on the capture stream allocating from
the graph's pool, which the capture then reuses, as Inductor's trees warm up in their pool. Both
on pipec's stream in the caller's memory, they left blocks cached for that stream alone, which
the caller's work could not reuse until an `empty_cache`. Captures call `capture_begin` themselves: `torch.cuda.graph`'s entry also
synchronizes and empties the allocator's caches, per record.
Captures run on pipec's own stream, with the cuBLAS workspaces cleared before and after:
PyTorch caches one workspace per (handle, stream), so a capture on a shared stream
(torch.cuda.graph's default one, which Triton's do_bench_cudagraph also captures on) bakes in
a workspace that another capture allocated in another pool. That workspace is freed when its
graph dies or when anyone clears the workspaces (Inductor's CUDA Graph trees do, around each
recording), the next `empty_cache` hands its memory back to the driver, and the replay that
still uses it fails with "an illegal memory access was encountered": what mixing pipec and
Inductor under reduce-overhead did. Cleared before, a capture allocates its own workspace in
its own pool (which lives as long as the graph); cleared after, no other capture borrows it.
Warm-up runs and captures leave the RNG state as they found it, so a record, whenever it
happens, draws nothing a replay would not.

Written inputs (Program.writes: an optimizer step's parameters and state, a static KV cache).
Warm-up runs write clones of them, so only the replay applies an update (a capture runs
nothing). A graph writes an input where it reads it: a pinned one is the caller's memory; one
read from the graph's own buffer is copied back into the caller's tensor after the replay.

Without CUDA, for CPU inputs, or when capture fails (a host sync, out of memory, an op that
cannot be captured), it runs as ``launch``, with one warning naming the reason.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from pipec_ir import CompileOptions, LoadContext, Program

from .input_guard import InputGuard, InputSpec, same_strides
from .buckets import GraphTable, PadPolicy, budget_from, copy_input, prefix_slices
from .capture_support import (capture_stream, clear_cublas_workspaces, pool_held, preserved_rng,
                              recover_from_failed_capture)
from .profiling import graph_range, profiler_state
from .pysource import Source, compile_source
from .runner import ProgramRunner
from .variants import Call, InputView, Slot, Variant, is_static_input, use_count
from .writes import written_inputs

NO_CUDA_MESSAGE = "cudagraph runtime: no CUDA device, running as 'launch'"

# Ops whose output size depends on the data: they synchronize with the host, which
# a CUDA Graph capture cannot do. Programs calling them are not captured at all.
HOST_SYNC_TARGETS = frozenset({
    "aten.nonzero.default", "aten.masked_select.default", "aten._unique2.default", "aten.unique_dim.default",
    "aten.unique_consecutive.default", "aten._local_scalar_dense.default", "aten.item.default",
    "aten.repeat_interleave.Tensor", "aten.index.Tensor_bool", "aten.equal.default", "aten.is_nonzero.default",
    "aten._linalg_check_errors.default",  # reads a factorization's `info` (torch.linalg.inv's error)
})

# torch's functional collectives (pipec's `collective` ops run as these)
COLLECTIVE_PREFIX = "_c10d_functional."

MAX_SHARED = 2  # variants per key whose outputs go to the caller: two serve a `y = model(x)` loop
MAX_RECORDS = 6  # shared variants recorded per key in all (pins that moved, double buffers)
MAX_PRIVATE = 2  # private (output-copying) variants recorded per key
# re-records per key past MAX_RECORDS for static inputs that moved (Inductor's CUDA Graph trees
# allow as many: `cudagraph_unexpected_rerecord_limit`)
MAX_STATIC_MOVES = 128


def _current_device() -> int:
    """The current CUDA device's index (what `Tensor.get_device()` gives for a tensor on it)."""
    return torch._C._cuda_getDevice()


def _device_index(device: torch.device) -> int:
    return device.index if device.index is not None else (-1 if device.type == "cpu" else _current_device())


class NeedsWarmUp(Exception):
    """A capture without warm-up found no specialized run for its inputs (their guards failed):
    it captured nothing, and the record warms up and captures again."""


class CudaGraphProgram:
    """A loaded Program replayed through CUDA Graphs: `prog(list_of_tensors) -> list`."""

    device_type = "cuda"  # the device whose calls are graphed (the CPU tests simulate graphs)

    def __init__(self, program: Program, options: CompileOptions | None = None,
                 context: LoadContext | None = None):
        options = options or CompileOptions()
        # replays pay no host time: choice groups go by GPU time
        self.runner = ProgramRunner(program, options, context, choice_timer="graph")
        self.name = program.name
        self.padding = PadPolicy(self.runner, self.runner.bucket_policy)
        self.graphs = GraphTable(budget_from(self.runner.context, options, program.name), program.name)
        self.options = options
        self.fallback: str | None = None  # why we run as launch, once capture failed
        self.replays: dict[tuple, Callable] = {}  # exact symbol values -> generated replay
        self._warmed: set[tuple] = set()  # graph keys whose kernels the warm-up compiled and tuned
        self._spare = None  # the graph of a variant just dropped: the next record reuses its pool
        # the warnings given, once each: "held" (outputs copied, or plain launches, for a caller holding
        # outputs), "moving" (the same for inputs that keep moving), "moves" (re-records used up)
        self._warned: set[str] = set()
        sync = [st.target for st in program.steps if st.kind == "extern" and st.target in HOST_SYNC_TARGETS]
        self._not_capturable = f"{sync[0]} synchronizes with the host" if sync else None
        # collectives run as launched: gloo cannot be captured at all, and NCCL under capture (its
        # work handles, waited on at capture time only) is not tested yet (docs/distributed.md)
        comm = [st.target for st in program.steps if st.kind == "extern" and st.target.startswith(COLLECTIVE_PREFIX)]
        if comm and not sync:
            self._not_capturable = f"{comm[0]} communicates through torch.distributed"
        # inputs the program writes (Program.writes): warm-ups write clones of them, and a replay
        # that read one from its own buffer copies the buffer back into the caller's tensor
        self.written = frozenset(k for k, _ in self.runner.write_index)

    def __call__(self, inputs, in_range: bool = False) -> list:
        if profiler_state._is_profiler_enabled and not in_range:  # name the call (profiling.py)
            with graph_range(self.runner.range_name):
                return self(inputs, True)
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
        if self.runner.first_call_pending:
            return self._first_call(inputs)
        return self._call(inputs)

    def _first_call(self, inputs) -> list:
        """`_call`, timed as the compile-time profile's first run (its warm-ups and capture)."""
        self.runner.first_call_pending = False
        with self.runner.profile.part("first_run"):
            return self._call(inputs)

    def _call(self, inputs) -> list:
        """The general path: check the inputs, pick (or record) a variant, replay."""
        runner = self.runner
        if self.fallback is not None:  # inside this call's range, if a profiler records
            return runner(inputs, profiler_state._is_profiler_enabled)
        originals = written_inputs(runner.write_index, inputs) if runner.write_index else ()
        prepared, symvals, device = runner.prepare(inputs)
        if device.type != self.device_type:
            return runner.run(prepared, symvals, device, originals=originals)
        values = self.padding.graph_values(symvals)
        key = (device.index, values)
        slot = self.graphs.get(key)
        if slot is None:
            slot = self.graphs.record(key, lambda: Slot(len(prepared)))  # a new size: charged
            if slot is None:  # over budget
                return runner.run(prepared, symvals, device, originals=originals)
        call = Call(runner, slot, inputs, prepared, symvals, values, device)
        slot.last[:] = call.ptrs
        graph = self._pick(slot, call)
        if graph is None:  # every variant's outputs held and no record left, or capture failed
            return runner.run(prepared, symvals, device, originals=originals)
        out = self._replay(graph, prepared, symvals, values, inputs)
        if symvals not in self.replays and _device_index(device) == _current_device():
            self.replays[symvals] = self._build_replay(slot, symvals, values, device)
        return out

    # ------------------------------------------------------------------ picking a variant
    def _pick(self, slot: Slot, call: Call) -> Variant | None:
        """A variant this call can replay, recorded if needed (see the module docstring)."""
        free = [g for g in slot.shared if g.accepts(call.ptrs, call.strides) and not g.held()]
        for g in free:
            if call.want <= g.pinned.keys():
                return self._touch(slot, g)
        if slot.records < MAX_RECORDS:
            victim = free[0] if free else None  # it copies an input the new variant pins: superseded
            if victim is None and len(slot.shared) >= MAX_SHARED:
                victim = next((g for g in reversed(slot.shared) if not g.held()), None)
            if victim is not None or len(slot.shared) < MAX_SHARED:
                if victim is not None:
                    self._drop(slot, victim)
                return self._record(slot, call, call.want, private=False)
        if free:
            return self._touch(slot, free[0])
        moved = next((g for g in reversed(slot.shared) if not g.held() and g.statics_moved(call)), None)
        # a new static cache each `generate` (the old one gone, or at addresses never seen here): re-record,
        # as Inductor does; static sets that take turns (all alive, each seen before) go on as before
        if moved is not None and (moved.statics_gone() or call.placement() not in slot.placements):
            if slot.moves < MAX_STATIC_MOVES:
                slot.moves += 1
                self._drop(slot, moved)
                return self._record(slot, call, call.want, private=False)
            self._warn_once("moves", f"cudagraph runtime: program {self.name!r}: its static inputs (parameters, "
                            f"tensors marked static) moved {MAX_STATIC_MOVES} times at these sizes, each a new "
                            "CUDA Graph record; calls whose static inputs moved run as plain launches from now on",
                            stacklevel=3)
            return None
        return self._private(slot, call)

    def _private(self, slot: Slot, call: Call) -> Variant | None:
        """The variant whose outputs are cloned, for a caller that holds the shared ones' outputs."""
        g = slot.private
        held = any(g.held() for g in slot.shared)
        if g is None or not g.accepts(call.ptrs, call.strides):
            if slot.private_records >= MAX_PRIVATE:
                self._warn(held, "this call and others like it run as plain launches")
                return None
            if g is not None:
                g.release()
                slot.private = None
            g = self._record(slot, call, call.static, private=True)
        if g is not None:
            self._warn(held, "while it does, outputs are copies (a clone each)")
        return g

    def _warn(self, held: bool, consequence: str) -> None:
        if held:
            self._warn_once("held", f"cudagraph runtime: program {self.name!r}: the caller still holds outputs of its "
                            f"last {MAX_SHARED} calls at these sizes, which a replay would overwrite; {consequence}. "
                            "Drop the outputs you no longer need, or clone those you keep, to avoid it", stacklevel=5)
        else:
            self._warn_once("moving", f"cudagraph runtime: program {self.name!r}: inputs it reads in place (static ones, "
                            f"or ones that stayed where the previous call had them) keep moving between calls at these "
                            f"sizes, past its {MAX_RECORDS} records; {consequence}", stacklevel=5)

    def _warn_once(self, what: str, message: str, stacklevel: int) -> None:
        """`message` once per program and kind; `stacklevel` counts from the caller (all point at `__call__`)."""
        if what not in self._warned:
            self._warned.add(what)
            warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)

    @staticmethod
    def _touch(slot: Slot, g: Variant) -> Variant:
        if slot.shared[0] is not g:
            slot.shared.remove(g)
            slot.shared.insert(0, g)
        return g

    def _drop(self, slot: Slot, g: Variant) -> None:
        """Forget `g` (its outputs are the caller's no more); a record follows, and captures in
        its memory pool, which `g`'s graph keeps alive until then (`_spare`)."""
        slot.shared.remove(g)
        g.release()
        self._spare = g.graph
        self.replays.clear()

    # ------------------------------------------------------------------ recording
    def _record(self, slot: Slot, call: Call, pin: set, private: bool) -> Variant | None:
        try:
            g = self._new_variant(slot, call, pin, private)
        finally:
            self._spare = None  # the dropped graph, whose pool the capture took over, dies here
        if g is None:
            return None
        self._warmed.add((call.device.index, call.values))
        if private:
            slot.private_records += 1
            slot.private = g
        else:  # a placement only a copying variant served is still new to the shared ones
            slot.placements.add(call.placement())
            slot.records += 1
            slot.shared.insert(0, g)
        self.replays.clear()
        return g

    def _new_variant(self, slot: Slot, call: Call, pin: set, private: bool) -> Variant | None:
        if self._not_capturable:
            self._give_up(self._not_capturable)
            return None
        if not private:
            # shared variants whose static inputs are gone (the caches of earlier generates) go
            # first: their pools hold memory no call needs, and a key left with the new variant
            # alone regenerates the same replay text at each re-record (pysource.py reuses its code)
            for old in [g for g in slot.shared if not g.held() and g.statics_gone()]:
                self._drop(slot, old)
        return self._capture(call, pin, private)

    def _give_up(self, reason: str) -> None:
        self.fallback = reason
        self.replays.clear()
        warnings.warn(f"cudagraph runtime: capturing program {self.name!r} failed ({reason}); "
                      f"running as 'launch'", RuntimeWarning, stacklevel=6)

    def _capture(self, call: Call, pin: set, private: bool) -> Variant | None:
        """Record a graph at the call's graph key, reading the inputs in `pin` in place and the
        others from buffers of its own; None (and the program runs as launch) if it fails."""
        pinned = {i: (call.ptrs[i], call.strides[i]) for i in sorted(pin)}
        own = [i for i in range(len(call.prepared)) if i not in pin]  # read from the graph's own buffers
        # at a key recorded before, the kernels are compiled and tuned: the capture needs no
        # warm-up run (Inductor's CUDA Graph trees warm a function up once, too); else two, the
        # first compiles and tunes, the second settles
        warmups = 0 if (call.device.index, call.values) in self._warmed else 2
        inputs, values, device = call.prepared, call.values, call.device
        try:
            try:
                graph, outputs, buffers = self._record_graph(inputs, own, values, device, warmups, self._spare)
            except NeedsWarmUp:  # no specialized run for these inputs: nothing was captured
                graph, outputs, buffers = self._record_graph(inputs, own, values, device, 1, self._spare)
            except Exception:  # noqa: BLE001 - retried once, warmed up: a run may compile a kernel variant
                if warmups:
                    raise
                recover_from_failed_capture(call.device)
                graph, outputs, buffers = self._record_graph(inputs, own, values, device, 1, None)
        except Exception as e:  # noqa: BLE001 - any capture failure falls back to plain launches
            recover_from_failed_capture(call.device)
            self._give_up(f"{type(e).__name__}: {e}".splitlines()[0])
            return None
        caller = {call.prepared[i].untyped_storage().data_ptr(): (i, call.prepared[i]) for i in pinned}
        statics = {i: StorageWeakRef(call.prepared[i].untyped_storage()) for i in pinned if i in call.static}
        return Variant(graph, pinned, buffers, outputs, private, caller, statics)

    def _record_graph(self, inputs: list, own: list, values: tuple, device, warmups: int, share=None):
        """(CUDA graph, its outputs, its input buffers {index: tensor}) of the program run at
        `values` on `inputs`, those in `own` read from buffers of the graph's own: warm-up runs,
        then the capture, on pipec's stream, in a memory pool of its own: a new one, or the pool
        of `share`, a dropped graph that never replays again (module docstring). The buffers are
        made inside the capture, in that pool, and filled after it."""
        with torch.cuda.device(device), preserved_rng(device):
            stream = capture_stream(device)
            pool = share.pool() if share is not None else torch.cuda.graph_pool_handle()
            with pool_held(device, pool) as route:
                if warmups:
                    self._warm_up(inputs, own, values, stream, route, warmups)
                stream.wait_stream(torch.cuda.current_stream())
                graph, outputs, buffers = self._capture_in(pool, stream, inputs, own, values, device, warmups)
            for i, buf in buffers.items():
                self.padding.fill_buffer(buf, inputs[i])
        return graph, outputs, buffers

    def _warm_up(self, inputs: list, own: list, values: tuple, stream, route, warmups: int) -> None:
        """Runs before a key's first capture. All but the last run on the caller's stream and
        memory, as a plain call does: the first compiles and tunes, and its temporaries stay
        where the caller's own work can reuse them (on pipec's stream they stayed reserved for
        that stream alone, until an `empty_cache`). The last runs on the
        capture stream, allocating from the graph's pool (`route`), which its capture then reuses,
        as Inductor's CUDA Graph trees warm up in theirs."""
        # a warm-up writes clones of the written inputs: only the replay applies an update;
        # the padded copies it reads are the caller's until its end (first records only)
        warm_inputs = [self.padding.padded_input(i, t, values) if i in own else t.clone() if i in self.written
                       else t for i, t in enumerate(inputs)]
        for _ in range(warmups - 1):
            self.runner(warm_inputs)  # the runner's own call: its first builds the specialized run
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), route():
            self.runner(warm_inputs)
        del warm_inputs
        torch.cuda.current_stream().wait_stream(stream)

    def _capture_in(self, pool, stream, inputs: list, own: list, values: tuple, device, warmups: int):
        """The capture itself, in `pool` on `stream`: (graph, outputs, the input buffers, unfilled)."""
        runner, padding = self.runner, self.padding
        graph = torch.cuda.CUDAGraph()
        clear_cublas_workspaces()  # the capture allocates its own, in its own pool
        try:
            # not `torch.cuda.graph`, whose entry synchronizes and empties the allocator's
            # caches: once per `generate` of a decoder, that stalls the host until the GPU
            # drains and hands cached memory back to the driver, which later calls ask for again
            with torch.cuda.stream(stream):
                graph.capture_begin(pool=pool, capture_error_mode="thread_local")
                try:
                    # allocated on the capturing stream: in the graph's pool, not the caller's,
                    # whose blocks a decoder's next static cache would otherwise miss
                    buffers = {i: padding.input_buffer(i, inputs[i], values) for i in own}
                    graph_inputs = [buffers.get(i, t) for i, t in enumerate(inputs)]
                    # the specialized run where its guards pass: a record (one per `generate`
                    # of a decoder) then costs the host what a plain call does, not the
                    # general path's step-by-step interpretation (Llama-1B: ~20 ms a run against ~3)
                    outputs = runner.run_specialized(graph_inputs)
                    if outputs is None:
                        if not warmups:  # only a run built and run before is captured cold
                            raise NeedsWarmUp
                        outputs = runner.run(graph_inputs, values, device)
                finally:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # "The CUDA Graph is empty" (NeedsWarmUp)
                        graph.capture_end()
        finally:
            clear_cublas_workspaces()  # no later capture borrows this graph's
        return graph, outputs, buffers

    # ------------------------------------------------------------------ replaying
    def _replay(self, g: Variant, prepared: list, symvals: tuple, values: tuple, callers: list) -> list:
        for i, buf in g.buffers.items():
            copy_input(buf, prepared[i])
        g.graph.replay()
        for i in self.written & g.buffers.keys():  # the graph wrote its own copy of the input
            callers[i].detach().copy_(g.buffers[i])
        graph_outputs = [t if isinstance(t, torch.Tensor) else None for t in g.outputs]
        real = self.padding.real_outputs(graph_outputs, symvals, values)
        return g.hand_out([v if r is None else r for r, v in zip(real, g.outputs)], prepared)

    def _build_replay(self, slot: Slot, symvals: tuple, values: tuple, device):
        """`replay(inputs) -> outputs | None` for calls at exactly `symvals`, generated: the input
        guards, then per variant (in the order the general path would pick them) the pinned
        addresses, whether the caller holds its outputs, the input copies, the replay and the
        output aliases (clones for the private one). None: take the general path, which also
        records when a copied input stayed where it was (`LAST`) and another record is allowed.

        The source holds the graphs' output tensors, never views of them (a prefix is sliced
        per call): its references must not change the use counts `held` compares with. Addresses
        and counts are constants of its namespace, not literals: a re-record at a new static cache
        generates the same text, whose code object pysource.py keeps."""
        runner = self.runner
        src = Source()
        n = len(runner.program.inputs)
        call_shapes = [tuple(int(d) for d in fn(*symvals)) for fn in runner.input_shapes]
        graph_shapes = [tuple(int(d) for d in fn(*values)) for fn in runner.input_shapes]
        in_place = [a == b for a, b in zip(call_shapes, graph_shapes)]
        lines = ["def replay(inputs):", f"    if len(inputs) != {n}: return None"]
        if n:
            lines.append(f"    {', '.join(f'x{i}' for i in range(n))}{',' if n == 1 else ''} = inputs")
        index = _device_index(device)
        if n:  # in Python only where one C call says the inputs differ from those last accepted
            guard = src.const("G", InputGuard())
            spec = src.const("SPEC", InputSpec(runner.input_dtypes, [torch.Size(s) for s in call_shapes], index))
            lines.append(f"    if not {guard}.same(inputs):")
            lines.append(f"        if not {spec}.matches(inputs): return None")
            lines.append(f"        {guard}.learn(inputs)")
        learned = len(lines)  # where the accepted inputs' pinned strides are checked, per variant
        lines.append(f"    if {src.const('DEVICE', _current_device)}() != {index}: return None")
        use, last = src.const("USE", use_count), src.const("LAST", slot.last)
        promote = slot.records < MAX_RECORDS
        # per variant, whether the inputs last accepted have the strides its pinned inputs were
        # recorded with: inputs the C check passes have those inputs' strides, so the strides are
        # compared once per accepted layout, not at every call
        strides_ok: list[str] = []
        flag_values: list[bool] = []
        flags = src.const("STRIDES_OK", flag_values)

        def held(g: Variant) -> str:
            return " or ".join(f"{use}({src.const('C', s._cdata)}) > {src.const('N', count)}" for s, count in g.tracked)

        shared = [g for g in slot.shared if all(in_place[i] for i in g.pinned)]
        for g in shared:
            free = " and ".join(f"{use}({src.const('C', s._cdata)}) <= {src.const('N', count)}"
                                for s, count in g.tracked)
            self._emit_variant(lines, src, g, free, symvals, values, call_shapes, in_place,
                               promote, last, (flags, strides_ok))
        priv = slot.private
        if priv is not None and all(in_place[i] for i in priv.pinned):
            # the general path takes it once no shared variant serves, unless it may still re-record
            # one: `promote`, or (`_pick`) a shared variant pinning static inputs elsewhere than this
            # one does, while re-records are left; otherwise the fast path replays it itself
            same_statics = all(g.pinned.get(i) == p for g in slot.shared for i, p in priv.pinned.items())
            if not promote and (same_statics or slot.moves >= MAX_STATIC_MOVES):
                self._emit_variant(lines, src, priv, "", symvals, values, call_shapes, in_place, False, last,
                                   (flags, strides_ok))
            elif len(slot.shared) >= MAX_SHARED and len(shared) == len(slot.shared) \
                    and all(g.tracked for g in shared):  # it takes it when every shared one is held
                self._emit_variant(lines, src, priv, " and ".join(f"({held(g)})" for g in shared), symvals,
                                   values, call_shapes, in_place, False, last, (flags, strides_ok))
        lines.append("    return None")
        flag_values.extend([False] * len(strides_ok))  # until the first accepted inputs
        lines[learned:learned] = [f"        {flags}[{j}] = {expr}" for j, expr in enumerate(strides_ok)]
        return compile_source(lines, src.namespace, f"<pipec replay {self.name} {symvals}>", reuse=True)

    def _emit_variant(self, lines, src, g: Variant, condition: str, symvals, values, call_shapes,
                      in_place, promote: bool, last: str, strides: tuple[str, list]) -> None:
        """The lines replaying `g` when its pinned inputs are where it reads them and `condition`
        holds. `strides`: (the flags' name, the list collecting each variant's stride check)."""
        runner = self.runner
        conds = [f"x{i}.data_ptr() == {src.const('P', p)}" for i, (p, _) in g.pinned.items()]
        if g.pinned:
            flags, checks = strides
            conds.insert(0, f"{flags}[{len(checks)}]")
            indices, pinned_strides = src.const("I", tuple(g.pinned)), src.const("T", tuple(s for _, s in g.pinned.values()))
            checks.append(f"{src.const('SAME_STRIDES', same_strides)}(inputs, {indices}, {pinned_strides})")
        if condition:
            conds.append(condition)
        lines.append(f"    if {' and '.join(conds) or 'True'}:")
        for i in g.buffers:
            lines.append(f"        p{i} = x{i}.data_ptr()")
            if promote and in_place[i]:  # before any update of LAST: the general path reads it
                contiguous = f" and x{i}.is_contiguous()" if i in runner.dense_inputs else ""
                lines.append(f"        if p{i} == {last}[{i}]{contiguous}: return None")
        for i, buf in g.buffers.items():
            lines.append(f"        {last}[{i}] = p{i}")
            b = src.const("IN", buf)
            if in_place[i]:
                lines.append(f"        if p{i} != {src.const('P', buf.data_ptr())}: {b}.copy_(x{i})")
            else:  # recorded at a larger bucket: into the prefix
                lines.append(f"        {b}[{src.const('SL', prefix_slices(call_shapes[i]))}].copy_(x{i})")
        lines.append(f"        {src.const('REPLAY', g.graph.replay)}()")
        for i in sorted(self.written & g.buffers.keys()):  # the graph wrote its own copy of the input
            b = src.const("IN", g.buffers[i])
            lines.append(f"        if p{i} != {src.const('P', g.buffers[i].data_ptr())}: x{i}.detach().copy_({b})")
        made: dict[tuple, str] = {}
        outs = []
        for t, shape_fn in zip(g.outputs, runner.output_shapes):
            if t is None:
                outs.append("None")
                continue
            if isinstance(t, InputView):
                key = (id(t), None)
                expr = f"{src.const('VIEW', t.of)}(x{t.index})"
            else:
                shape = tuple(t.shape) if shape_fn is None else tuple(int(d) for d in shape_fn(*symvals))
                key = (id(t), shape)
                expr = src.const("OUT", t)
                if shape != tuple(t.shape):
                    expr = f"{expr}[{src.const('SL', prefix_slices(shape))}]"
                expr = f"{expr}.detach()"
            if key not in made:
                made[key] = f"o{len(made)}"
                lines.append(f"        {made[key]} = {expr}{'.clone()' if g.private or id(t) in g.copied else ''}")
            outs.append(made[key])
        lines.append(f"        return [{', '.join(outs)}]")


def load_cudagraph(program: Program, options: CompileOptions | None = None,
                   context: LoadContext | None = None) -> Callable[[list], list]:
    """The ``cudagraph`` runtime's `load`: CUDA Graph replay on CUDA, else ``launch``."""
    if not torch.cuda.is_available():
        warnings.warn(NO_CUDA_MESSAGE, RuntimeWarning, stacklevel=2)
        return ProgramRunner(program, options, context)
    return CudaGraphProgram(program, options, context)


__all__ = ["CudaGraphProgram", "load_cudagraph", "is_static_input", "capture_stream", "clear_cublas_workspaces",
           "NO_CUDA_MESSAGE"]

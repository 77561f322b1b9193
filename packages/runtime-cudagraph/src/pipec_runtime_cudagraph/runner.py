"""`ProgramRunner`: a loaded Program as a flat list of prebuilt step closures (steps.py).

Every tensor argument of a launch is contiguous with its buffer's shape and dtype. Per call
the work is: check the inputs and `.contiguous()` those a kernel reads, bind size symbols,
allocate the buffers written by kernels (one uint8 storage per memory-plan slot, viewed as each
buffer), run the closures, drop intermediates after their last use. After the first call at
some sizes, later calls at those sizes take a specialized run (specialize.py).
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from pipec_ir import CompileOptions, CompileProfile, LoadContext, Program, TritonKernel

from .autotune import MEMO_KEY, TuningMemo, compile_all, tuning_log
from .choices import group_choices
from .compile_pool import compiled_already, pool_size, start_in_workers, warm
from .fastlaunch import current_stream_getter, hooks_active
from .interpreter import enable_interpreter, honour_debug, interpreter_active, interpreter_scope
from .kernels import body_digest, kernel_cache_dir, load_kernel
from .launch_store import LaunchStore
from .memory import round_up
from .owned_inputs import input_releases
from .pdl import grid_dependency_source, pdl_supported
from .plan import ProgramPlan
from .profiling import graph_range, profiler_state, range_name, ranged_plan
from .rounds import PRUNE
from .specialize import build_specialized
from .static_launch import static_launcher_impl
from .steps import ExternStep, HostExtern, LaunchStep, ProgramLoadError, plan_objects, runs_on_host
from .tuning_cache import TuningCache
from .writes import apply_writes, written_inputs

# Specialized runs kept per program (one per distinct size tuple); past it, new sizes take
# the general path (it is correct, only slower).
MAX_SPECIALIZED = 64


def input_strides(inputs) -> list | None:
    """Per input: None if it is a contiguous tensor, else its strides; None for the whole list
    if an input is not a tensor (`prepare` then says why)."""
    out = []
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            return None
        out.append(None if t.is_contiguous() else tuple(t.stride()))
    return out


def outputs_to_caller(outs: list, moved: list, inputs: list) -> list:
    """`outs` (computed from `moved`, the device copies of the caller's `inputs`) as CPU tensors
    with eager's aliasing: an input passed through is the caller's tensor itself, a view of an
    input is that view of the caller's tensor, outputs sharing storage share one copy of it, and
    a value returned twice is one tensor twice."""
    same = {id(m): t for m, t in zip(moved, inputs)}
    storages = {m.untyped_storage().data_ptr(): t.untyped_storage() for m, t in zip(moved, inputs)}
    back = []
    for t in outs:
        if t is None or id(t) in same:
            back.append(None if t is None else same[id(t)])
            continue
        if not t.untyped_storage().nbytes():
            copy = t.cpu()
        else:
            key = t.untyped_storage().data_ptr()
            if key not in storages:
                storages[key] = t.untyped_storage().cpu()
            copy = torch.empty(0, dtype=t.dtype).set_(storages[key], t.storage_offset(), t.shape, t.stride())
        same[id(t)] = copy
        back.append(copy)
    return back


class ProgramRunner(ProgramPlan):
    """A loaded Program: `runner(list_of_tensors) -> list[Tensor | None]`.

    `options` are the compile's (cache-keyed) options; `context` the loaded model's live state
    (`LoadContext`: recompile budget, compile profile, kernel directory, tuning memos), shared
    by every program of the model; without one, the runner has a context of its own."""

    def __init__(self, program: Program, options: CompileOptions | None = None,
                 context: LoadContext | None = None, choice_timer: str = "wall"):
        options = options or CompileOptions()
        self.context = context = context if context is not None else LoadContext()
        # the compile-time profile (pipec_ir.profile): what loading, compiling, tuning and the first
        # call cost, recorded while a window measures a model's first call (else nothing is kept)
        self.profile = context.profile or CompileProfile()
        self.first_call_pending = True  # the next call through __call__ is the program's first
        self.autotune = bool(options.autotune)
        self.kernel_dir = context.kernel_dir
        # autotuning: the picks are kept for the model (`memo`) and on disk per (kernel, size
        # bucket, GPU) unless the context says tuning_cache=False; autotune_configs=N times only
        # the first N candidates (1: no timing at all)
        self.memo = context.memo(MEMO_KEY, TuningMemo)
        self.tuning_cache = TuningCache(self.kernel_dir) if context.tuning_cache else None
        self.autotune_configs = options.get("autotune_configs")
        if self.autotune_configs is not None and (
                not isinstance(self.autotune_configs, int) or self.autotune_configs < 1):
            raise ProgramLoadError(f"autotune_configs must be a positive integer, got {self.autotune_configs!r}")
        self.choice = options.get("choice")  # force this alternative in every choice group (choices.py)
        # the shipped tuning table (tuning_table.py) answers before anything is timed, except where
        # every candidate must be timed (the max-autotune modes) or the option turns it off
        self.use_tuning_table = bool(options.get("tuning_table", True)) and not options.get("max_autotune", False)
        # candidates clearly slower than the best after two rounds stop being timed (rounds.py),
        # except where every candidate must be timed in full
        self.prune_timing = None if options.get("max_autotune", False) else PRUNE
        # worker processes compiling Triton kernels (compile_pool.py): the context's count, else one
        # per core; 0 compiles in this process's thread pool
        self.compile_workers = pool_size(context.compile_workers)
        super().__init__(program, options.get("bucket", "pow2"))
        # its calls' range in profiler traces (profiling.py): the graph's name as the front end gave it
        self.range_name = range_name(options.get("graph_name") or program.name)
        self.tuned: dict[tuple[str, tuple], int] = {}  # (kernel, size bucket) -> chosen config index

        self._plans: dict[str, list] = {}
        self._launches: dict[str, list] = {}  # device type -> every launch of its plan (alternatives too)
        self._precompiled: set[tuple] = set()  # (device type, size bucket) whose first call compiled at once
        # compiles sent to the worker pool at load (`_start_compiles`), waited for by the first call
        self.early_compile = bool(options.get("early_compile", True))
        self._started_compiles = None
        self._plan_facts: dict[tuple, tuple] = {}  # (what, id(plan)) -> (plan, fact): `_per_plan`
        # symbol values -> (device, specialized run): see `specialize.py`
        self.specialized: dict[tuple, tuple] = {}
        self.specialize = bool(options.get("specialize", True))
        # launches through torch's C++ launcher where it can describe the kernel (static_launch.py)
        self.static_launch = bool(options.get("static_launch", True))
        # programmatic dependent launch between the Triton kernels of a CUDA Graph (pdl.py)
        self.pdl = (choice_timer == "graph" and bool(options.get("pdl", True)) and torch.cuda.is_available()
                    and not interpreter_active() and pdl_supported(torch.cuda.current_device()))
        self._pdl_kernels: dict[str, TritonKernel | None] = {}  # kernel name -> its PDL form, or None
        # launches an earlier process compiled, run from their cubins without Triton (launch_store.py);
        # kernel modules are then imported only when something needs them
        self.launch_store = None
        if self.static_launch and options.get("launch_store", True) and static_launcher_impl() is not None \
                and torch.cuda.is_available() and not interpreter_active():
            self.launch_store = LaunchStore(kernel_cache_dir(self.kernel_dir) / "launches")
        self._raw_stream = None
        # how choice groups are timed (choices.py): "graph" under CUDA Graphs. Set before the
        # compiles start at load, which ask the table for the picks under this timer
        self.choice_timer = choice_timer
        self.default_device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        if self.default_device.type == "cpu":
            enable_interpreter()
        else:  # the workers import Triton while the program loads; the first call compiles
            warm(self.compile_workers)
        self._plans[self.default_device.type] = self._build(self.default_device.type)
        if self.default_device.type == "cuda":
            self._start_compiles(self.default_device)

    @property
    def plans(self) -> dict[str, list]:
        """device type -> the step list built for it (`[(step, released values), ...]`)."""
        return self._plans

    def _build(self, device_type: str, tune: bool | None = None) -> list:
        """The step closures for one device type (cuda: compiled kernels, cpu: interpreter)."""
        interpret = device_type == "cpu" or interpreter_active()
        reads_by_launch = {n for s in self.program.steps if s.kind == "launch" for n in s.inputs}
        if tune is None:
            tune = self.autotune and not interpret
        steps = []
        for k, s in enumerate(self.program.steps):
            if s.kind == "launch":
                kernel = self.kernels.get(s.target)
                if kernel is None:
                    raise ProgramLoadError(f"program {self.name}: step {k} launches unknown kernel {s.target!r}")
                self.profile.distinct("kernels", (self.name, kernel.name))
                self.profile.distinct("unique_kernels", body_digest(kernel))  # identical layers: one
                # under CUDA Graphs on sm_90, a Triton kernel waits for the one ahead in its body and
                # is launched with PDL (pdl.py); `kernel` keeps its source, which digests and tables key on
                loaded = self._pdl_kernel(kernel) if self.pdl and not interpret else None
                pdl = loaded is not None
                if pdl:  # counted, so a compile's profile says whether its graph launches with PDL
                    self.profile.distinct("pdl_kernels", (self.name, kernel.name))
                loaded = loaded or kernel
                if self.launch_store is not None and not interpret:  # imported at its first use, if any
                    load = functools.partial(load_kernel, loaded, interpret=False, cache_dir=self.kernel_dir)
                    steps.append((LaunchStep(self, s, kernel, None, interpret, tune, load=load, pdl=pdl),
                                  self.release[k]))
                    continue
                fn = load_kernel(loaded, interpret=interpret, cache_dir=self.kernel_dir)
                fn = honour_debug(fn) if interpret else fn
                steps.append((LaunchStep(self, s, kernel, fn, interpret, tune, pdl=pdl), self.release[k]))
            elif s.kind == "extern":
                steps.append((ExternStep(s, self.index, reads_by_launch, self.symbols), self.release[k]))
            else:
                raise ProgramLoadError(f"program {self.name}: step {k} has unknown kind {s.kind!r}")
        self._launches[device_type] = [step for step, _ in steps if isinstance(step, LaunchStep)]
        return group_choices(self, steps, tune, self.choice)

    def _pdl_kernel(self, kernel: TritonKernel) -> TritonKernel | None:
        """`kernel` with its body waiting for the kernel ahead (pdl.py); None for a Gluon kernel."""
        if kernel.name not in self._pdl_kernels:
            source = grid_dependency_source(kernel.source, kernel.name)
            self._pdl_kernels[kernel.name] = None if source is None else dataclasses.replace(kernel, source=source)
        return self._pdl_kernels[kernel.name]

    def precompile_once(self, inputs: list, symvals: tuple, device: torch.device) -> None:
        """`_precompile` on the first call of each size bucket (all symbols) on each device type:
        a new bucket may bring new configs to time and new sizes to specialize for."""
        key = (device.type, self.bucket_key(symvals))
        if key not in self._precompiled:
            self._precompiled.add(key)
            self._precompile(inputs, symvals, device)

    def _precompile(self, inputs: list, symvals: tuple, device: torch.device) -> None:
        """Compile what the first call will compile, all at once (`compile_all`): every launch's
        candidate configs, those of every choice-group alternative that may run included (where a
        group's pick is known without timing, only that one's: `_unpicked_launches`), which the steps
        would otherwise compile one launch after another. Compiles started when the program
        loaded (`_start_compiles`) are waited for first: most of these are then cache hits."""
        jobs, launches = self._compile_jobs(inputs, symvals, device)
        if len(jobs) > 1:
            tuning_log.info("%s: compiling %d kernel configs of %d launches at once", self.name, len(jobs), launches)
        started, self._started_compiles = self._started_compiles, None
        compile_all(jobs, self.profile, self.compile_workers, started=started)

    def _compile_jobs(self, inputs: list, symvals: tuple, device: torch.device) -> tuple[list[tuple], int]:
        """(every compile job of the plan for `device` at `symvals`, how many launches have
        one). Values not given (not made yet, or every input before the first call) are stood
        in for by small tensors of their dtype: compiling reads only dtypes and alignment."""
        jobs, launches = [], 0
        for found in self._jobs_by_launch(inputs, symvals, device):
            jobs += found
            launches += bool(found)
        return jobs, launches

    def _jobs_by_launch(self, inputs: list, symvals: tuple, device: torch.device):
        """`_compile_jobs`' jobs, one list per launch, made as they are asked for: listing a
        launch's jobs imports its kernel's module where the launch store does not hold it."""
        stand_ins: dict[torch.dtype, torch.Tensor] = {}

        def tensor(i: int):
            if i < len(inputs):
                return inputs[i]
            dtype = self.value_dtypes.get(i)
            if dtype is not None and dtype not in stand_ins:
                stand_ins[dtype] = torch.empty(16, dtype=dtype, device=device)
            return stand_ins.get(dtype)

        grouped = {id(s) for step, _ in self._plans.get(device.type, ())
                   for steps in (getattr(step, "alternatives", None) or {}).values() for s in steps}
        skipped = None  # made at the first launch of a choice group: a warm load stops before any
        for launch in self._launches.get(device.type, ()):
            if id(launch) in grouped:
                skipped = self._unpicked_launches(symvals, device) if skipped is None else skipped
                if id(launch) in skipped:
                    continue
            args = [tensor(i) for i in launch.ptrs]
            if all(a is not None for a in args):
                yield launch.compile_jobs(launch.candidates(symvals, device), args, symvals)

    def _unpicked_launches(self, symvals: tuple, device: torch.device) -> set[int]:
        """ids of the launches of choice-group alternatives that will not run at `symvals`: the
        group's pick is known without timing (the tuning table, the tuning cache, an earlier
        decision), so only that alternative is compiled. SD 1.5's and ConvNeXt's GEMM groups each
        have a Triton template, a cuBLAS product with its epilogue kernel and a Gluon kernel; a
        template's compile alone takes 1-2.5 s of a worker (docs/performance.md, "Session 36")."""
        skipped = set()
        for step, _ in self._plans.get(device.type, ()):
            known = getattr(step, "known_pick", None)
            pick = known(symvals, device) if known is not None else None
            if pick is not None:
                skipped.update(id(s) for name, steps in step.alternatives.items() if name != pick for s in steps)
        return skipped

    def _start_compiles(self, device: torch.device) -> None:
        """Send the first call's compiles to the worker pool now, while the program loads, and
        wait for them only at that call: meanwhile the front end lowers the next graph (the
        backward, the graph after a break) and the first call autotunes what is built. Only
        where the sizes are known before any call (no size symbols); best effort: whatever is
        not compiled here is compiled, as before, at the first call. Where the first kernel is
        in Triton's cache already (a warm compile), nothing is sent: capturing every job to find
        the cache hits would cost more than the first call's own loads. The jobs are listed only
        once the first is known to need compiling: listing them imports every kernel module the
        launch store does not hold (BERT base training, warm on an H100: 100 modules, 0.33-0.62 s)."""
        if not self.static_shapes or self.compile_workers <= 0 or not self.early_compile:
            return
        from torch.utils._python_dispatch import _disable_current_modes

        try:
            # a program loads inside torch.compile, under its fake-tensor mode: stand-ins must be real
            with _disable_current_modes():
                by_launch = self._jobs_by_launch([], (), device)
                first = next((found for found in by_launch if found), None)
                if first and not compiled_already(first[0]):
                    jobs = first + [job for found in by_launch for job in found]
                    self._started_compiles = start_in_workers(jobs, self.compile_workers)
        except Exception as e:  # noqa: BLE001 - e.g. no CUDA to make stand-ins on: the first call compiles
            tuning_log.debug("%s: compiles not started at load: %s: %s", self.name, type(e).__name__, e)

    # ---------------------------------------------------------- per call
    def _fail(self, message: str):
        raise RuntimeError(f"pipec program {self.name!r}: {message}")

    def prepare(self, inputs) -> tuple[list, tuple, torch.device]:
        """Check the inputs against Program.inputs; -> (inputs, contiguous where a kernel reads them
        (`dense_inputs`), symbol values, device)."""
        specs = self.program.inputs
        if len(inputs) != len(specs):
            self._fail(f"expected {len(specs)} inputs ({', '.join(b.name for b in specs)}), got {len(inputs)}")
        for i, (t, dtype) in enumerate(zip(inputs, self.input_dtypes)):
            if not isinstance(t, torch.Tensor):
                self._fail(f"input {i} ({specs[i].name}) is a {type(t).__name__}, expected a tensor")
            if t.dtype != dtype:
                self._fail(f"input {i} ({specs[i].name}) has dtype {str(t.dtype).removeprefix('torch.')}, "
                           f"expected {specs[i].type.dtype}")
        symvals = tuple(inputs[i].shape[d] for i, d in self.symbol_source)
        for value, name, (lo, hi) in zip(symvals, self.symbols, self.symbol_ranges):
            if (lo is not None and value < lo) or (hi is not None and value > hi):
                self._fail(f"size {name}={value} is outside its range [{lo}, {hi if hi is not None else 'inf'}]")
        for i, (t, shape) in enumerate(zip(inputs, self.input_shapes)):
            expected = shape(*symvals)
            if t.shape != expected:
                self._fail(f"input {i} ({specs[i].name}) has shape {tuple(t.shape)}, expected {tuple(expected)}")
        # the GPU the inputs are on; CPU tensors beside them (index tensors, scalars) move to it,
        # as ATen moves them for an op that takes them (kernels cannot read host memory)
        device = next((t.device for t in inputs if t.device.type != "cpu"), None)
        device = device or (inputs[0].device if inputs else self.default_device)
        for i, t in enumerate(inputs):
            if t.device != device and t.device.type != "cpu":
                first = next(k for k, u in enumerate(inputs) if u.device == device)
                self._fail(f"input {i} ({specs[i].name}) is on {t.device}, input {first} is on {device}")
        dense = self.dense_inputs
        return [t.to(device).contiguous() if i in dense else t.to(device) for i, t in enumerate(inputs)], symvals, device

    def steps_for(self, device: torch.device) -> list:
        plan = self._plans.get(device.type)
        if plan is None:
            plan = self._plans[device.type] = self._build(device.type)
        return plan

    def run(self, inputs: list, symvals: tuple, device: torch.device, observe: dict | None = None,
            owned: bool = False, originals=None) -> list:
        """Run the steps on prepared inputs; the program's outputs. `observe` (a dict) receives
        {value: (shape, stride, dtype)} of every tensor value the run made (views.py reads it).
        `owned`: the caller handed `inputs` over; it is cleared once read (owned_inputs.py).
        `originals`: the caller's written inputs (writes.py; default: `inputs`' own)."""
        if originals is None:
            originals = written_inputs(self.write_index, inputs) if self.write_index else ()
        if device.type == "cpu" and not interpreter_active() and torch.cuda.is_available():
            return self.run_cpu_on_cuda(inputs, symvals, originals)
        steps = self.steps_for(device)
        if device.type == "cpu" and profiler_state._is_profiler_enabled:  # interpreter kernels: a range each
            steps = ranged_plan(self, steps)
        if device.type == "cuda" and not interpreter_active():
            with torch.cuda.device(device):
                self.precompile_once(inputs, symvals, device)
        schedule = self._allocation_schedule(steps)
        vals = [None] * self.nvals
        vals[:len(inputs)] = inputs
        if owned:
            inputs.clear()
        args = (steps, schedule, vals, symvals, device, observe, self._input_drops(steps))
        if device.type == "cpu" and not interpreter_active():
            with interpreter_scope(True):
                self._run_steps(*args)
        elif device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                self._run_steps(*args)
        else:
            self._run_steps(*args)
        if self.write_index:
            apply_writes(self.write_index, originals, vals)
        if observe is not None:
            observe_values(observe, range(self.nvals), vals)
        return [None if i is None else vals[i] for i in self.out_index]

    def _per_plan(self, what: str, steps: list, build):
        """`build(steps)`, computed once per plan list (the runner keeps its plans for good)."""
        key = (what, id(steps))
        cached = self._plan_facts.get(key)
        if cached is None or cached[0] is not steps:
            cached = self._plan_facts[key] = (steps, build(steps))
        return cached[1]

    def _allocation_schedule(self, steps: list) -> list:
        """Per plan position, the allocations made just before it: each slot's storage (with
        the views of all its buffers) and each unslotted buffer where it is first written,
        so what the memory plan says is live is what is allocated (as in specialize.py)."""
        return self._per_plan("schedule", steps, self._schedule_of)

    def _schedule_of(self, steps: list) -> list:
        first: dict[int, int] = {}
        for k, (step, _) in enumerate(steps):
            for obj in plan_objects(step):
                for i in getattr(obj, "allocates", getattr(obj, "writes", ())):
                    first.setdefault(i, k)
        schedule: list[list] = [[] for _ in steps] or [[]]
        for nbytes, views in self.slot_allocs:
            k = min(first.get(i, 0) for i, *_ in views)
            schedule[k].append((nbytes, views))
        for i, shape, dtype in self.plain_allocs:
            schedule[first.get(i, 0)].append((None, ((i, dtype, shape, None),)))
        return schedule

    @staticmethod
    def _allocate(actions, vals, symvals, device) -> None:
        for nbytes, views in actions:
            if nbytes is None:  # a buffer of its own
                (i, dtype, shape, _), = views
                vals[i] = torch.empty(shape(*symvals), dtype=dtype, device=device)
                continue
            storage = torch.empty(round_up(max(nbytes(*symvals))), dtype=torch.uint8, device=device)
            for i, dtype, shape, size in views:
                vals[i] = storage[:size(*symvals)[0]].view(dtype).view(shape(*symvals))

    def run_cpu_on_cuda(self, inputs: list, symvals: tuple, originals=()) -> list:
        """CPU tensors on a machine with CUDA: the kernels run on the GPU, everything else as
        it would for CPU tensors, and the caller gets CPU tensors.

        Why not the interpreter here: before triton 3.7 the interpreter patches
        triton.language for good when it first runs a kernel, so every kernel compiled
        for the GPU afterwards in the same process fails to build.

        * Extern calls other than views run on the CPU (`HostExtern`): ops with only a CPU
          kernel (`_scaled_dot_product_flash_attention_for_cpu`), random draws from the CPU
          generator eager uses, and ATen's CPU numerics.
        * Outputs keep eager's aliasing: an input passed through is the input itself, a view
          of an input is that view of the caller's tensor, outputs sharing storage share
          one copied-back storage.
        """
        cuda = torch.device("cuda", torch.cuda.current_device())
        moved = [t.to(cuda) for t in inputs]
        steps = self._plans.get("cpu-on-cuda")
        if steps is None:
            steps = self._plans["cpu-on-cuda"] = [(HostExtern(s, self.index) if runs_on_host(s) else s, r)
                                                  for s, r in self.steps_for(cuda)]
        vals = [None] * self.nvals
        vals[:len(moved)] = moved
        self._run_steps(steps, self._allocation_schedule(steps), vals, symvals, cuda)
        apply_writes(self.write_index, originals, vals)  # into the caller's CPU tensors
        return outputs_to_caller([None if i is None else vals[i] for i in self.out_index], moved, inputs)

    def _input_drops(self, steps: list) -> list:
        """Per plan position, the inputs whose last reader is there (owned_inputs.py)."""
        def drops_of(steps: list) -> list:
            at = input_releases(((k, plan_objects(step)) for k, (step, _) in enumerate(steps)), self)
            return [tuple(at.get(k, ())) for k in range(len(steps))]

        return self._per_plan("drops", steps, drops_of)

    @classmethod
    def _run_steps(cls, steps, schedule, vals, symvals, device, observe: dict | None = None,
                   drops: list | None = None) -> None:
        """Run `steps`, releasing each value after its last reader: the plan's buffers, and with
        `drops` (per position) the run's own references to its inputs."""
        if not steps:
            cls._allocate(schedule[0], vals, symvals, device)
        for k, ((step, release), actions) in enumerate(zip(steps, schedule)):
            if actions:
                cls._allocate(actions, vals, symvals, device)
            step(vals, symvals, device)
            if observe is not None:
                observe_values(observe, release, vals)
            for i in release:
                vals[i] = None
            if drops is not None:
                if observe is not None:
                    observe_values(observe, drops[k], vals)
                for i in drops[k]:
                    vals[i] = None

    def __call__(self, inputs, in_range: bool = False, owned: bool = False) -> list:
        """One call. `in_range`: a profiler records and this call's range is open (profiling.py);
        then no specialized interpreter run, which would hide the kernels from the profiler (the
        general path gives each its range). `owned`: as `call_owned`."""
        if profiler_state._is_profiler_enabled and not in_range:  # name the call and its kernels
            with graph_range(self.range_name):
                return self(inputs, True, owned)
        if self.specialized:
            out = self._run_specialized(inputs, not in_range, owned)
            if out is not None:
                return out
        if self.first_call_pending:
            self.first_call_pending = False
            with self.profile.part("first_run"):
                return self(inputs, in_range, owned)
        may_specialize = self.specialize and len(self.specialized) < MAX_SPECIALIZED
        strides = input_strides(inputs) if may_specialize else None  # before `prepare` copies any
        given = inputs
        originals = written_inputs(self.write_index, given) if self.write_index else ()
        inputs, symvals, device = self.prepare(inputs)  # a list of its own
        if owned:
            given.clear()  # the caller's references go now, the run's after their last readers
        specialize = may_specialize and symvals not in self.specialized
        observed = {} if specialize else None  # the layouts the specialized run builds on
        out = self.run(inputs, symvals, device, observed, owned=owned, originals=originals)
        if specialize:
            self._specialize(symvals, device, observed, strides)
        return out

    def call_owned(self, inputs: list) -> list:
        """One call on inputs the caller hands over (AOTAutograd's boxed call, `steal_args`): the
        run may clear `inputs`, and drops each input after its last reader, so a tensor nobody
        else holds (a saved activation) is freed there (owned_inputs.py). The caller must not
        read `inputs` afterwards. Anything but a list is read as a plain call's."""
        return self(inputs, owned=isinstance(inputs, list))

    def run_specialized(self, inputs: list) -> list | None:
        """The specialized run for these inputs, if one was built for their sizes and its guards
        pass; else None, and nothing ran (the cudagraph runtime's captures: no specialization
        is built inside a capture)."""
        return self._run_specialized(inputs)

    def _run_specialized(self, inputs, interpreted: bool = True, owned: bool = False) -> list | None:
        """The specialized run for these inputs' sizes, or None (guards failed, other device, or
        an interpreter run when not `interpreted`)."""
        try:
            symvals = tuple([inputs[i].shape[d] for i, d in self.symbol_source])
        except (IndexError, AttributeError, TypeError):
            return None
        entry = self.specialized.get(symvals)
        if entry is None:
            return None
        device_index, run = entry
        if device_index < 0:
            return run(inputs, None, owned) if interpreted else None
        if torch._C._cuda_getDevice() != device_index or hooks_active():
            return None
        return run(inputs, self._raw_stream(device_index), owned)

    def _specialize(self, symvals: tuple, device: torch.device, observed: dict | None = None,
                    strides: list | None = None) -> None:
        """Build the specialized run for `symvals` on `device` (a plain CUDA device that is the
        current one, or the CPU under the interpreter); other cases keep the general path.
        `strides`: per input, None if it was contiguous, else its strides (input_strides)."""
        if device.type == "cuda":
            if device.index is not None and device.index != torch.cuda.current_device():
                return
            device = torch.device("cuda", torch.cuda.current_device())
            if self._raw_stream is None:
                self._raw_stream = current_stream_getter()
        elif not (device.type == "cpu" and interpreter_active()):
            return
        run = build_specialized(self, self.steps_for(device), symvals, device, observed or {}, strides)
        if run is None:
            return
        self.specialized[symvals] = (device.index if device.type == "cuda" else -1, run)


def observe_values(observed: dict, indices, vals) -> None:
    for i in indices:
        v = vals[i]
        if isinstance(v, torch.Tensor) and i not in observed:
            observed[i] = (tuple(v.shape), v.stride(), v.dtype)


__all__ = ["MAX_SPECIALIZED", "ProgramRunner", "input_strides", "outputs_to_caller"]

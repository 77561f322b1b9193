"""The step objects of a loaded program: a kernel launch (`LaunchStep`) and an ATen call
(`ExternStep`), each a closure `step(vals, symvals, device)` over the per-call value list.

Calling convention of a `launch` step (what codegen must emit):

    kernel[grid](*step.inputs, *step.outputs,          # tensors (pointer args)
                 *[int(e) for _, e in kernel.sizes],    # integer args, positional
                 **dict(config.constants),              # constexprs, by keyword
                 num_warps=config.num_warps, num_stages=config.num_stages,
                 maxnreg=config[MAXNREG] if set)        # Triton's register cap (1.4)
    grid = tuple(cdiv(int(e), config[name]) if name else int(e) for e, name in kernel.grid)
"""

from __future__ import annotations

import math
import types

import sympy
import torch

from pipec_ir import MAXNREG_CONSTANT, TMA_CONSTANT, Device, Dtype, Ref, Size, get_attr, ref_names

from . import extern_ops  # registers the pipec.* extern targets; guards ATen's buggy ones
from .autotune import forget_table_pick, known_config, time_configs, tuning_keys
from .exprs import compile_ints, is_static, static_ints
from .fastlaunch import ALIGN_MASK, bind_launcher, current_stream_getter, fast_path_available, launch_values
from .interpreter import ieee_quiet
from .kernels import body_digest
from .launch_store import StoredLaunch
from .memory import is_view_target
from .tma import ensure_allocator, misaligned, persistent_grid, sm_count, uses_tma

TORCH_DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")}


class ProgramLoadError(RuntimeError):
    """The program cannot be run by this runtime (unknown extern, bad kernel arity...)."""


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def resolve_target(target: str):
    """"aten.mm.default" -> torch.ops.aten.mm.default (the overload packet's default when
    the overload is omitted)."""
    parts = target.split(".")
    try:
        if parts[0] == "torch" and parts[1] == "ops":
            parts = parts[2:]
        op = getattr(getattr(torch.ops, parts[0]), parts[1])
        return getattr(op, parts[2] if len(parts) > 2 else "default")
    except (AttributeError, IndexError, RuntimeError):
        raise ProgramLoadError(f"extern target {target!r} is not a torch operator overload") from None


# ------------------------------------------------------------------ extern arguments

def compile_arg(value, index: dict[str, int], where: str, symbols: tuple[str, ...] = ()):
    """(is_constant, value | fn(vals, symvals, device)) for one attribute value.

    A `Size` leaf (a symbolic size) is evaluated with the call's symbol values."""
    if isinstance(value, Ref):
        if value.name not in index:
            raise ProgramLoadError(f"{where}: argument refers to unknown value {value.name!r}")
        i = index[value.name]
        return False, lambda vals, symvals, device: vals[i]
    if isinstance(value, Size):
        expr = value.value
        if not expr.free_symbols:
            return True, int(expr)
        try:
            evaluate = compile_ints([expr], symbols)
        except KeyError as e:
            raise ProgramLoadError(f"{where}: size {value.expr} uses symbol {e.args[0]}, which no input "
                                   "dimension binds") from None
        return False, lambda vals, symvals, device: evaluate(*symvals)[0]
    if isinstance(value, Dtype):
        if value.name not in TORCH_DTYPES:
            raise ProgramLoadError(f"{where}: unknown dtype {value.name!r}")
        return True, TORCH_DTYPES[value.name]
    if isinstance(value, Device):
        return False, lambda vals, symvals, device: device
    if isinstance(value, (tuple, list)):
        parts = [compile_arg(v, index, where, symbols) for v in value]
        if all(c for c, _ in parts):
            const = [v for _, v in parts]
            return False, lambda vals, symvals, device: list(const)  # a fresh list: ops may keep it
        fns = [(c, v) for c, v in parts]
        return False, lambda vals, symvals, device: [v if c else v(vals, symvals, device) for c, v in fns]
    return True, value


class ExternStep:
    __slots__ = ("op", "args", "kwargs", "outs", "contiguous", "name", "ir")

    def __init__(self, step, index, reads_by_launch, symbols: tuple[str, ...] = ()):
        where = f"extern step {step.target}"
        self.ir = step
        self.name = step.target
        self.op = extern_ops.guarded(step.target, resolve_target(step.target))
        self.args = [compile_arg(v, index, where, symbols) for v in (get_attr(step.attrs, "args", ()) or ())]
        self.kwargs = [(k, *compile_arg(v, index, where, symbols))
                       for k, v in (get_attr(step.attrs, "kwargs", ()) or ())]
        self.outs = tuple(index[o] for o in step.outputs)
        # a launch reads its tensors as dense row-major memory
        self.contiguous = tuple(o in reads_by_launch for o in step.outputs)

    def __call__(self, vals, symvals, device):
        args = [v if c else v(vals, symvals, device) for c, v in self.args]
        kwargs = {k: (v if c else v(vals, symvals, device)) for k, c, v in self.kwargs}
        result = self.op(*args, **kwargs)
        if isinstance(result, (tuple, list)):
            for o, r, contig in zip(self.outs, result, self.contiguous):
                vals[o] = r.contiguous() if contig else r
        elif self.outs:
            vals[self.outs[0]] = result.contiguous() if self.contiguous[0] else result


class HostExtern:
    """An extern call of a CPU program whose kernels run on the GPU (`ProgramRunner.run_cpu_on_cuda`): it
    reads its tensors on the CPU and its results go back to the GPU."""

    __slots__ = ("extern", "reads", "name", "ir", "outs")

    def __init__(self, extern: ExternStep, index: dict[str, int]) -> None:
        self.extern, self.name, self.ir, self.outs = extern, extern.name, extern.ir, extern.outs
        self.reads = tuple(index[n] for n in extern.ir.inputs)

    def __call__(self, vals, symvals, device):
        local = list(vals)
        for i in self.reads:
            if isinstance(local[i], torch.Tensor):
                local[i] = local[i].cpu()
        self.extern(local, symvals, torch.device("cpu"))
        for o in self.outs:
            if isinstance(local[o], torch.Tensor):
                vals[o] = local[o].to(device)


def runs_on_host(step) -> bool:
    """Externs that are not views (views stay on the GPU: they alias what kernels write)."""
    return isinstance(step, ExternStep) and not is_view_target(step.name)


def written_over(result: torch.Tensor, shape, dtype: torch.dtype) -> torch.Tensor:
    """The output of an in-place launch over the library result `result`: that storage, viewed
    with the output's shape; a fresh tensor where it cannot be (a library that returned another
    layout or dtype than the Program says: the launch then still computes the right values)."""
    if result.dtype == dtype and result.is_contiguous() and result.numel() == math.prod(shape):
        return result.view(shape)
    return torch.empty(shape, dtype=dtype, device=result.device)


# ------------------------------------------------------------------ kernel launches

class CannotRunHere:
    """Stands in for a Gluon kernel (IR 1.4) where it cannot run: under Triton's CPU interpreter,
    or one written for Hopper (wgmma) on another GPU. A program may hold it as a choice-group
    alternative that is then never picked (its build fails, so it loses without being compiled);
    forced, it says why."""

    def __init__(self, name: str, why: str):
        self.name, self.why = name, why

    def __getitem__(self, grid):
        raise ProgramLoadError(f"kernel {self.name} {self.why} (force another alternative, e.g. choice='template')")


def gluon_cannot_run(fn, interpret: bool, capability: tuple[int, int] | None = None) -> str | None:
    """Why the Gluon kernel `fn` cannot run here (None for a Triton kernel, or one that can):
    the CPU interpreter runs no Gluon, and Hopper's warpgroup MMAs need compute capability 9.0
    (`capability`: the current GPU's when not given)."""
    if not type(fn).__module__.startswith("triton.experimental.gluon"):
        return None
    if interpret:
        return "is written in Gluon, which runs on a GPU only: Triton's CPU interpreter cannot run it"
    hopper = "triton.experimental.gluon.language.nvidia.hopper"
    names = getattr(getattr(fn, "fn", None), "__globals__", {}).values()  # what the kernel's module imported
    uses_hopper = any(_origin(v).startswith(hopper) for v in names)
    if uses_hopper and capability is None:
        capability = torch.cuda.get_device_capability()
    if uses_hopper and capability != (9, 0):
        return (f"is written in Gluon for Hopper (sm_90: wgmma); this GPU is sm_{capability[0]}{capability[1]}")
    return None


def _origin(value) -> str:
    """The module a module-level name comes from."""
    return value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None) or ""


def _skip(stream, *ptrs) -> None:
    """A launch with an empty grid."""


def current_stream(index: int):
    """The raw current CUDA stream of device `index`."""
    return current_stream_getter()(index)


def _index(device: torch.device) -> int:
    return device.index if device.index is not None else torch.cuda.current_device()


class LaunchStep:
    """One kernel launch; autotunes (CUDA, several configs) on its first run in each size
    bucket (the runner's bucket policy over the size symbols this kernel uses)."""

    __slots__ = ("runner", "kernel", "_fn", "_load", "ptrs", "interpret", "config", "kwargs", "dims", "static",
                 "skip", "tune", "sym_index", "bucket", "prepared", "compiled", "maybe_unaligned", "writes",
                 "n_inputs", "tma", "binds", "allocates", "pdl")

    def __init__(self, runner, step, kernel, fn, interpret, tune, load=None, pdl=False):
        """`fn`: the kernel's loaded @triton.jit function; or None and `load`, which loads it
        when something first needs it (a launch the runner's launch store cannot serve). `pdl`:
        `fn` waits for the kernel ahead in its body (pdl.py), so it is launched with PDL."""
        self.runner, self.kernel, self.interpret, self.pdl = runner, kernel, interpret, pdl
        self._fn, self._load = fn, load
        n = len(step.inputs) + len(step.outputs)
        if kernel.args and len(kernel.args) != n:
            raise ProgramLoadError(
                f"launch of {kernel.name}: the kernel takes {len(kernel.args)} pointer arguments "
                f"({', '.join(kernel.args)}) but the step binds {n}")
        if not kernel.configs:
            raise ProgramLoadError(f"kernel {kernel.name} has no launch config")
        self.ptrs = tuple(runner.index[v] for v in (*step.inputs, *step.outputs))
        self.n_inputs = len(step.inputs)
        self.writes = tuple(runner.index[v] for v in step.outputs)
        # outputs written over a library call's result that dies here (`inplace` naming a value
        # without a slot): bound to that result's storage right before the launch, never allocated
        self.binds = runner.result_binds(step)
        bound = {o for o, _, _, _ in self.binds}
        self.allocates = tuple(i for i in self.writes if i not in bound)
        used = set()
        for e in [e for _, e in kernel.sizes] + [e for e, _ in kernel.grid]:
            used |= {x.name for x in sympy.sympify(e).free_symbols}
        self.sym_index = tuple(i for i, name in enumerate(runner.symbols) if name in used)
        limit = runner.autotune_configs
        self.tune = tune and len(kernel.configs) > 1 and (limit is None or limit > 1)
        self.bucket = None  # the bucket the current config was chosen for
        self.prepared: dict[int, tuple] = {}  # config index -> what set_config computes
        # (device index, config, sizes) -> (compiled kernel, pointer positions that were aligned)
        self.compiled: dict[tuple, tuple] = {}
        # pointer positions the runner does not allocate itself (inputs, library results)
        self.maybe_unaligned = tuple(j for j, i in enumerate(self.ptrs) if i not in runner.allocated)
        # configs reading through TMA descriptors (tma.py): Triton's allocator, and configs[0] for
        # a call with a misaligned pointer
        self.tma = any(uses_tma(c) for c in kernel.configs)
        if self.tma and not interpret:
            ensure_allocator()
        if fn is not None:
            self._fn = self._runnable(fn)
        self.set_config(kernel.configs[0])

    def _runnable(self, fn):
        why = gluon_cannot_run(fn, self.interpret)
        # loads, as an unpicked alternative must; fails if run
        return fn if why is None else CannotRunHere(self.kernel.name, why)

    @property
    def fn(self):
        """The kernel's @triton.jit function (loaded at its first use where the runner loads lazily)."""
        if self._fn is None:
            self._fn = self._runnable(self._load())
        return self._fn

    def stored(self, ptrs: list, sizes, device):
        """(the launch store's record of this launch with the current config at `sizes` with
        `ptrs`, its key); (None, None) without a store (launch_store.py), and for a kernel whose
        sizes are symbolic: a record holds one size, and a generation loop's every new length
        would write one, where Triton's one compile serves them all. A PDL launch is never
        stored: torch's launcher, which the store's records go through, cannot set the attribute."""
        store = self.runner.launch_store
        if store is None or self.interpret or self.pdl or device.type != "cuda" or not self.static:
            return None, None
        key = store.key(body_digest(self.kernel), self.kwargs, sizes, ptrs, device)
        return store.get(key), key

    def set_config(self, config) -> None:
        key = self.kernel.configs.index(config) if config in self.kernel.configs else None
        cached = self.prepared.get(key) if key is not None else None
        if cached is not None:
            self.config, self.kwargs, self.static, self.dims, self.skip = cached
            return
        self._prepare(config)
        if key is not None:
            self.prepared[key] = (self.config, self.kwargs, self.static, self.dims, self.skip)

    def _prepare(self, config) -> None:
        constants = dict(config.constants)
        self.config = config
        self.kwargs = dict(constants)
        if not self.interpret:
            self.kwargs.update(num_warps=config.num_warps, num_stages=config.num_stages)
            if constants.get(MAXNREG_CONSTANT):  # a warp-specialized kernel's register cap (docs/IR.md)
                self.kwargs["maxnreg"] = constants[MAXNREG_CONSTANT]
            if self.pdl:
                self.kwargs["launch_pdl"] = True
        exprs = [e for _, e in self.kernel.sizes] + [e for e, _ in self.kernel.grid]
        divisors = []
        for _, name in self.kernel.grid:
            if name and name not in constants:
                raise ProgramLoadError(
                    f"kernel {self.kernel.name}: grid divides by {name!r}, which its config does not set")
            divisors.append(constants[name] if name else 1)
        nsizes = len(self.kernel.sizes)
        # a persistent TMA config launches at most one program per SM of this GPU (tma.py)
        programs = sm_count() if uses_tma(config) and not self.interpret and torch.cuda.is_available() else None

        def split(values):
            sizes = values[:nsizes]
            grid = tuple(_cdiv(v, d) for v, d in zip(values[nsizes:], divisors)) or (1,)
            return sizes, grid if programs is None else persistent_grid(grid, programs)

        self.static = is_static(exprs)
        if self.static:
            self.dims = split(static_ints(exprs))
            self.skip = 0 in self.dims[1]
        else:
            evaluate = compile_ints(exprs, self.runner.symbols)
            self.dims = lambda *symvals: split(evaluate(*symvals))
            self.skip = False

    def run_config(self, config, ptrs, symvals) -> None:
        """One launch with `config` instead of the chosen one (a TMA config's misaligned call)."""
        chosen = self.config
        self.set_config(config)
        try:
            sizes, grid = self.dims if self.static else self.dims(*symvals)
            if not (self.skip or 0 in grid):
                self.fn[grid](*ptrs, *sizes, **self.kwargs)
        finally:
            self.set_config(chosen)

    def run_misaligned(self, ptrs, symvals) -> None:
        """A call with a pointer the TMA unit cannot read (not 16-byte aligned): `configs[0]`,
        the pointer kernel, where there is one; a kernel with only TMA configs (the Gluon
        ping-pong GEMM) runs on fresh, aligned memory instead: copies of such inputs, and
        outputs copied back after the launch."""
        first = self.kernel.configs[0]
        if not uses_tma(first):
            self.run_config(first, ptrs, symvals)
            return
        ptrs, write_back = list(ptrs), []
        for j in self.maybe_unaligned:
            if ptrs[j].data_ptr() & ALIGN_MASK:
                aligned = torch.empty_like(ptrs[j], memory_format=torch.contiguous_format)
                if j < self.n_inputs:
                    aligned.copy_(ptrs[j])
                else:
                    write_back.append((ptrs[j], aligned))
                ptrs[j] = aligned
        sizes, grid = self.dims if self.static else self.dims(*symvals)
        self.fn[grid](*ptrs, *sizes, **self.kwargs)
        for out, aligned in write_back:
            out.copy_(aligned)

    def bucket_of(self, symvals) -> tuple:
        """The size bucket of this call, over the symbols this kernel uses."""
        return self.runner.bucket_key(symvals, self.sym_index)

    def __call__(self, vals, symvals, device):
        for out, donor, shape, dtype in self.binds:
            vals[out] = written_over(vals[donor], shape(*symvals), dtype)
        if self.tune:
            bucket = self.bucket_of(symvals) if self.sym_index else ()
            if bucket != self.bucket:
                self.autotune(vals, symvals, bucket)
        sizes, grid = self.dims if self.static else self.dims(*symvals)
        if self.skip or 0 in grid:
            return
        ptrs = [vals[i] for i in self.ptrs]
        if self.tma and self.kwargs.get(TMA_CONSTANT) and misaligned(ptrs, self.maybe_unaligned):
            self.run_misaligned(ptrs, symvals)
            return
        if self.interpret:
            with ieee_quiet():
                self.fn[grid](*ptrs, *sizes, **self.kwargs)
            return
        aligned = tuple(j for j in self.maybe_unaligned if not ptrs[j].data_ptr() & ALIGN_MASK)
        at = (device.index, self.config, tuple(sizes))
        entry, key = self.compiled.get(at), None
        store = self.runner.launch_store
        if store is not None and (entry is None or (type(entry[0]) is StoredLaunch and entry[1] != aligned)):
            stored, key = self.stored(ptrs, sizes, device)
            if stored is not None and store.loads(key, stored, _index(device)):
                # compiled by an earlier process: its cubin, no Triton
                entry = self.compiled[at] = (stored, aligned)
                self.runner.profile.distinct("launches_from_store", key)
        if entry is not None and type(entry[0]) is StoredLaunch and entry[1] == aligned:
            index = _index(device)
            entry[0].launcher(grid, len(ptrs), index)(current_stream(index), *ptrs)
            return
        kernel = self.fn[grid](*ptrs, *sizes, **self.kwargs)
        if kernel is not None:
            self.compiled[at] = (kernel, aligned)
            if key is not None:
                self.record(key, kernel, sizes, len(ptrs))

    def record(self, key: str, kernel, sizes, nptrs: int) -> None:
        """Keep `kernel` (compiled for this launch) in the runner's launch store under `key`."""
        values = launch_values(self.fn, sizes, dict(self.config.constants), nptrs)
        if values is not None:
            self.runner.launch_store.put(key, kernel, values, nptrs)

    def launcher(self, symvals, device):
        """`f(stream, *pointers)` running this launch at `symvals` with the current config:
        the compiled kernel's own launcher once it was compiled for these sizes, else
        `fn[grid]` (the interpreter; a kernel not seen yet)."""
        sizes, grid = self.dims if self.static else self.dims(*symvals)
        if self.skip or 0 in grid:
            return _skip
        kwargs = self.kwargs
        tma_check = self.maybe_unaligned if self.tma and uses_tma(self.config) else ()

        def slow(*ptrs):  # self.fn: a kernel launched from the launch store is imported only if this runs
            if tma_check and misaligned(ptrs, tma_check):
                self.run_misaligned(ptrs, symvals)
                return
            if self.interpret:
                with ieee_quiet():
                    self.fn[grid](*ptrs, *sizes, **kwargs)
                return
            self.fn[grid](*ptrs, *sizes, **kwargs)

        compiled = None if self.interpret else self.compiled.get((device.index, self.config, tuple(sizes)))
        if compiled is None or not fast_path_available():
            return lambda stream, *ptrs: slow(*ptrs)
        kernel, aligned = compiled
        if isinstance(kernel, StoredLaunch):
            return kernel.bind(grid, len(self.ptrs), aligned, slow, _index(device))
        fast = bind_launcher(kernel, self.fn, grid, sizes, dict(self.config.constants), len(self.ptrs), aligned, slow,
                             device.index if self.runner.static_launch else None)
        return fast if fast is not None else (lambda stream, *ptrs: slow(*ptrs))

    def autotune(self, vals, symvals, bucket: tuple = ()) -> None:
        """Time every config (triton.testing.do_bench, in rounds: rounds.py) and keep the fastest
        for this kernel and size bucket (runner.tuned[(kernel name, bucket)]); a known bucket is
        not re-tuned (autotune.py)."""
        self.bucket = bucket
        runner = self.runner
        device = vals[self.ptrs[0]].device if self.ptrs else torch.device("cpu")
        chosen = known_config(self, bucket, device, symvals)
        shared_key, disk_key = tuning_keys(self, bucket, device)
        if chosen is not None and shared_key in runner.memo.from_table:
            why = self.cannot_run(chosen, vals, symvals)
            if why is not None:
                forget_table_pick(self, shared_key, why)
                chosen = None
        if chosen is None:
            with runner.profile.part("autotune"):
                chosen = time_configs(self, vals, symvals, bucket, shared_key, disk_key)
        runner.tuned[(self.kernel.name, bucket)] = chosen
        self.set_config(self.kernel.configs[chosen])

    def cannot_run(self, index: int, vals, symvals) -> str | None:
        """Why config `index` does not build or load on this GPU at `symvals` (Triton's error), or
        None when it does: a cache hit where the first call's compile built it already, or a launch
        an earlier process recorded (launch_store.py)."""
        if self.interpret:
            return None
        current = self.config
        self.set_config(self.kernel.configs[index])
        try:
            sizes, grid = self.dims if self.static else self.dims(*symvals)
            if self.skip or 0 in grid:
                return None
            ptrs = [vals[i] for i in self.ptrs]
            if ptrs and self.stored(ptrs, sizes, ptrs[0].device)[0] is not None:
                return None
            if not hasattr(self.fn, "warmup"):
                return None
            kernel = self.fn.warmup(*ptrs, *sizes, grid=grid, **self.kwargs)
            load = getattr(kernel, "_init_handles", None)  # registers and shared memory are checked on load
            if load is not None:
                load()
            return None
        except Exception as e:  # noqa: BLE001 - any failure: the candidates are timed instead
            return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
        finally:
            self.set_config(current)

    def known_config(self, bucket: tuple, device: torch.device, symvals: tuple | None = None) -> int | None:
        """The config already chosen for this kernel and size bucket, or the tuning table's pick
        at `symvals` (autotune.known_config)."""
        return known_config(self, bucket, device, symvals)


    def compile_jobs(self, configs, args: list, symvals: tuple) -> list[tuple]:
        """(fn, args, sizes, grid, kwargs) of each of `configs` this launch would compile at
        `symvals` (none where it launches nothing, or where an earlier process recorded the launch:
        launch_store.py); the current config is kept."""
        if self.interpret:
            return []
        jobs, current = [], self.config
        for config in configs:
            self.set_config(config)
            sizes, grid = self.dims if self.static else self.dims(*symvals)
            if self.skip or 0 in grid or (args and self.stored(args, sizes, args[0].device)[0] is not None):
                continue
            if not hasattr(self.fn, "warmup"):
                break
            jobs.append((self.fn, args, sizes, grid, self.kwargs))
        self.set_config(current)
        return jobs

    def candidates(self, symvals: tuple, device: torch.device) -> tuple:
        """The configs a call at `symvals` compiles: every one autotuning times, the one chosen
        before, or (no autotuning) the current one."""
        if not self.tune:
            return (self.config,)
        known = self.known_config(self.bucket_of(symvals) if self.sym_index else (), device, symvals)
        return self.kernel.configs[:self.runner.autotune_configs] if known is None else (self.kernel.configs[known],)


def touched_values(obj, runner) -> set[int] | None:
    """The values a step object (launch, extern, reinterpret, or one wrapped for the profiler)
    reads or writes; None for an object of a kind not known here."""
    ptrs = getattr(obj, "ptrs", None)
    if ptrs is not None:  # a launch: its pointers are every value it reads or writes
        return set(ptrs)
    ir = getattr(obj, "ir", None)
    if ir is None:
        return None
    names = (*ir.inputs, *ir.outputs, *(n for _, v in ir.attrs for n in ref_names(v)))
    return {runner.index[n] for n in names if n in runner.index}


def plan_objects(step) -> list:
    """The step objects at one position of a runner's plan: a choice group's every alternative
    (the general path may run any of them), else the step itself."""
    alternatives = getattr(step, "alternatives", None)
    return [o for alt in alternatives.values() for o in alt] if alternatives else [step]


__all__ = ["TORCH_DTYPES", "ExternStep", "HostExtern", "LaunchStep", "ProgramLoadError", "gluon_cannot_run",
           "plan_objects", "touched_values",
           "resolve_target", "runs_on_host", "written_over"]

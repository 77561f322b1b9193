"""The ``launch`` runtime: a `Program` as a flat list of prebuilt step closures.

Calling convention of a `launch` step (what codegen must emit):

    kernel[grid](*step.inputs, *step.outputs,          # tensors (pointer args)
                 *[int(e) for _, e in kernel.sizes],    # integer args, positional
                 **dict(config.constants),              # constexprs, by keyword
                 num_warps=config.num_warps, num_stages=config.num_stages,
                 maxnreg=config[MAXNREG] if set)        # Triton's register cap (1.4)
    grid = tuple(cdiv(int(e), config[name]) if name else int(e) for e, name in kernel.grid)

Every tensor argument is contiguous with its buffer's shape and dtype. Per call the
work is: check the inputs and `.contiguous()` those a kernel reads, bind size symbols, allocate the
buffers written by kernels (one uint8 storage per memory-plan slot, viewed as each
buffer), run the closures, drop intermediates after their last use.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import types
from collections.abc import Callable

import sympy
import torch

from pipec_ir import BUCKET_POLICIES, MAXNREG_CONSTANT, TMA_CONSTANT, CompileOptions, CompileProfile, Dtype, Device, Program, Ref, Size, bucket_of, get_attr

from . import extern_ops  # noqa: F401 - registers the pipec.* extern targets
from .choices import group_choices
from .exprs import compile_ints, is_static, static_ints
from .fastlaunch import ALIGN_MASK, bind_launcher, current_stream_getter, fast_path_available, hooks_active
from .interpreter import enable_interpreter, honour_debug, interpreter_active, interpreter_scope
from .kernels import body_digest, load_kernel
from .tuning_cache import TuningCache, tuning_key
from .memory import buffer_nbytes, is_view_target, plan_check, round_up
from .rounds import time_in_rounds
from .tma import ensure_allocator, misaligned, persistent_grid, sm_count, uses_tma

# What autotuning picked, at INFO: one line per kernel and size bucket it times (choices.py adds
# one per GEMM choice group). `logging.getLogger("pipec.tuning").setLevel(logging.INFO)` with a
# handler shows it.
tuning_log = logging.getLogger("pipec.tuning")

TORCH_DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")}


# Specialized runs kept per program (one per distinct size tuple); past it, new sizes take
# the general path (it is correct, only slower).
MAX_SPECIALIZED = 64


def _skip(stream, *ptrs) -> None:
    """A launch with an empty grid."""


def describe_config(config) -> str:
    """`XBLOCK=1 RBLOCK=4096 warps=8 stages=1`: a launch config as the tuning log prints it."""
    blocks = " ".join(f"{k}={v}" for k, v in config.constants)
    return f"{blocks} warps={config.num_warps} stages={config.num_stages}"


def input_strides(inputs) -> list | None:
    """Per input: None if it is a contiguous tensor, else its strides; None for the whole list
    if an input is not a tensor (`prepare` then says why)."""
    out = []
    for t in inputs:
        if not isinstance(t, torch.Tensor):
            return None
        out.append(None if t.is_contiguous() else tuple(t.stride()))
    return out


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

def _compile_arg(value, index: dict[str, int], where: str, symbols: tuple[str, ...] = ()):
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
        parts = [_compile_arg(v, index, where, symbols) for v in value]
        if all(c for c, _ in parts):
            const = [v for _, v in parts]
            return False, lambda vals, symvals, device: list(const)  # a fresh list: ops may keep it
        fns = [(c, v) for c, v in parts]
        return False, lambda vals, symvals, device: [v if c else v(vals, symvals, device) for c, v in fns]
    return True, value


class _Extern:
    __slots__ = ("op", "args", "kwargs", "outs", "contiguous", "name", "ir")

    def __init__(self, step, index, reads_by_launch, symbols: tuple[str, ...] = ()):
        where = f"extern step {step.target}"
        self.ir = step
        self.name = step.target
        self.op = resolve_target(step.target)
        self.args = [_compile_arg(v, index, where, symbols) for v in (get_attr(step.attrs, "args", ()) or ())]
        self.kwargs = [(k, *_compile_arg(v, index, where, symbols))
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


class _OnHost:
    """An extern call of a CPU program whose kernels run on the GPU (`_run_cpu_on_cuda`): it
    reads its tensors on the CPU and its results go back to the GPU."""

    __slots__ = ("extern", "reads", "name", "ir", "outs")

    def __init__(self, extern: _Extern, index: dict[str, int]) -> None:
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


def _runs_on_host(step) -> bool:
    """Externs that are not views (views stay on the GPU: they alias what kernels write)."""
    return isinstance(step, _Extern) and not is_view_target(step.name)


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


# ------------------------------------------------------------------ kernel launches

class _CannotRunHere:
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


class _Launch:
    """One kernel launch; autotunes (CUDA, several configs) on its first run in each size
    bucket (the runner's bucket policy over the size symbols this kernel uses)."""

    __slots__ = ("runner", "kernel", "fn", "ptrs", "interpret", "config", "kwargs", "dims", "static",
                 "skip", "tune", "sym_index", "bucket", "prepared", "compiled", "maybe_unaligned", "writes",
                 "n_inputs", "tma", "binds", "allocates")

    def __init__(self, runner, step, kernel, fn, interpret, tune):
        self.runner, self.kernel, self.fn, self.interpret = runner, kernel, fn, interpret
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
        why = gluon_cannot_run(fn, interpret)
        if why is not None:
            self.fn = _CannotRunHere(kernel.name, why)  # loads, as an unpicked alternative must; fails if run
        self.set_config(kernel.configs[0])

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
        kernel = self.fn[grid](*ptrs, *sizes, **self.kwargs)
        if not self.interpret and kernel is not None:
            aligned = tuple(j for j in self.maybe_unaligned if not ptrs[j].data_ptr() & ALIGN_MASK)
            self.compiled[(device.index, self.config, tuple(sizes))] = (kernel, aligned)

    def launcher(self, symvals, device):
        """`f(stream, *pointers)` running this launch at `symvals` with the current config:
        the compiled kernel's own launcher once it was compiled for these sizes, else
        `fn[grid]` (the interpreter; a kernel not seen yet)."""
        sizes, grid = self.dims if self.static else self.dims(*symvals)
        if self.skip or 0 in grid:
            return _skip
        fn, kwargs = self.fn, self.kwargs
        tma_check = self.maybe_unaligned if self.tma and uses_tma(self.config) else ()

        def slow(*ptrs):
            if tma_check and misaligned(ptrs, tma_check):
                self.run_misaligned(ptrs, symvals)
                return
            fn[grid](*ptrs, *sizes, **kwargs)

        compiled = None if self.interpret else self.compiled.get((device.index, self.config, tuple(sizes)))
        if compiled is None or not fast_path_available():
            return lambda stream, *ptrs: slow(*ptrs)
        kernel, aligned = compiled
        fast = bind_launcher(kernel, fn, grid, sizes, dict(self.config.constants), len(self.ptrs), aligned, slow)
        return fast if fast is not None else (lambda stream, *ptrs: slow(*ptrs))

    def autotune(self, vals, symvals, bucket: tuple = ()) -> None:
        """Time every config (triton.testing.do_bench, in rounds: rounds.py) and keep the fastest
        for this kernel and size bucket (runner.tuned[(kernel name, bucket)]); a known bucket is
        not re-tuned."""
        self.bucket = bucket
        runner = self.runner
        device = vals[self.ptrs[0]].device if self.ptrs else torch.device("cpu")
        chosen = self.known_config(bucket, device)
        shared_key, disk_key = self._tuning_keys(bucket, device)
        if chosen is None:
            with runner.profile.part("autotune"):
                chosen = self._time_configs(vals, symvals, bucket, shared_key, disk_key)
        runner.tuned[(self.kernel.name, bucket)] = chosen
        self.set_config(self.kernel.configs[chosen])

    def _time_configs(self, vals, symvals, bucket: tuple, shared_key: tuple, disk_key: str | None) -> int:
        """Index of the fastest config at `symvals`, timed now (`autotune`), stored for the
        process and in the tuning cache."""
        from triton.testing import do_bench

        runner = self.runner
        # outputs go to scratch tensors while timing: an in-place launch (output in its
        # input's slot) run again would read what it wrote the time before
        args = [vals[i] for i in self.ptrs]
        for j in range(self.n_inputs, len(args)):
            args[j] = torch.empty_like(args[j])
        # autotune_configs=N: time only the first N candidates (fast compiles; 1 = none)
        candidates = self.kernel.configs[:runner.autotune_configs]
        if self.tma and misaligned(args, self.maybe_unaligned):  # TMA needs aligned pointers
            candidates = [c for c in candidates if not uses_tma(c)]
        self._compile_candidates(candidates, args, symvals)
        calls, timed_configs = {}, self.kernel.configs[:runner.autotune_configs]
        for j, config in enumerate(timed_configs):
            if config in candidates:
                self.set_config(config)
                sizes, grid = self.dims if self.static else self.dims(*symvals)
                calls[j] = lambda g=grid, a=args, s=sizes, k=self.kwargs: self.fn[g](*a, *s, **k)
        runner.profile.count("kernels_timed")
        runner.profile.count("configs_tried", len(calls))
        # each config's time is its mean over rounds of alternating order (rounds.py: clock drift)
        timed, errors = time_in_rounds(calls, lambda call: do_bench(call, warmup=1, rep=5))
        times = [timed.get(j, math.inf) for j in range(len(timed_configs))]
        for j, e in errors.items():
            tuning_log.info("%s: config %s failed: %s: %s", self.kernel.name,
                            describe_config(self.kernel.configs[j]), type(e).__name__,
                            str(e).splitlines()[0][:200] if str(e) else "")
        if all(t == math.inf for t in times):
            raise next(iter(errors.values()), RuntimeError(f"no config of {self.kernel.name} could be timed"))
        chosen = min(range(len(times)), key=times.__getitem__)
        _TUNED[shared_key] = chosen
        tuning_log.info("%s%s: config %d of %d (%s), %.4f ms; all: %s", self.kernel.name,
                        f" bucket {bucket}" if bucket else "", chosen, len(times),
                        describe_config(self.kernel.configs[chosen]), times[chosen],
                        " ".join(f"{t:.4f}" for t in times))
        if disk_key is not None and len(times) > 1:
            runner.tuning_cache.put(disk_key, chosen, times)
        return chosen

    def known_config(self, bucket: tuple, device: torch.device) -> int | None:
        """The config already chosen for this kernel and size bucket: by this runner, for the
        same kernel body in this process (another layer, graph or compiled model), or by an
        earlier process (the tuning cache); None when it still has to be timed."""
        chosen = self.runner.tuned.get((self.kernel.name, bucket))
        if chosen is not None:
            return chosen
        shared_key, disk_key = self._tuning_keys(bucket, device)
        chosen = _TUNED.get(shared_key)
        if chosen is None and disk_key is not None:
            chosen = self.runner.tuning_cache.get(disk_key, len(self.kernel.configs))
            if chosen is not None:
                _TUNED[shared_key] = chosen
        return chosen

    def _tuning_keys(self, bucket: tuple, device: torch.device) -> tuple[tuple, str | None]:
        """(this process's key of the kernel body's choice, the tuning cache's key or None when
        there is no tuning cache)."""
        digest = body_digest(self.kernel)
        disk_key = (tuning_key(digest, bucket, _device_name(device), _triton_version())
                    if self.runner.tuning_cache is not None else None)
        return (digest, bucket, str(device)), disk_key

    def _compile_candidates(self, configs, args: list, symvals: tuple) -> None:
        """Compile every candidate config at once, before any is timed (`compile_all`)."""
        compile_all(self.compile_jobs(configs, args, symvals), self.runner.profile)

    def compile_jobs(self, configs, args: list, symvals: tuple) -> list[tuple]:
        """(fn, args, sizes, grid, kwargs) of each of `configs` this launch would compile at
        `symvals` (none where it launches nothing); the current config is kept."""
        if not hasattr(self.fn, "warmup") or self.interpret:
            return []
        jobs, current = [], self.config
        for config in configs:
            self.set_config(config)
            sizes, grid = self.dims if self.static else self.dims(*symvals)
            if not (self.skip or 0 in grid):
                jobs.append((self.fn, args, sizes, grid, self.kwargs))
        self.set_config(current)
        return jobs

    def candidates(self, symvals: tuple, device: torch.device) -> tuple:
        """The configs a call at `symvals` compiles: every one autotuning times, the one chosen
        before, or (no autotuning) the current one."""
        if not self.tune:
            return (self.config,)
        known = self.known_config(self.bucket_of(symvals) if self.sym_index else (), device)
        return self.kernel.configs[:self.runner.autotune_configs] if known is None else (self.kernel.configs[known],)


def written_over(result: torch.Tensor, shape, dtype: torch.dtype) -> torch.Tensor:
    """The output of an in-place launch over the library result `result`: that storage, viewed
    with the output's shape; a fresh tensor where it cannot be (a library that returned another
    layout or dtype than the Program says: the launch then still computes the right values)."""
    if result.dtype == dtype and result.is_contiguous() and result.numel() == math.prod(shape):
        return result.view(shape)
    return torch.empty(shape, dtype=dtype, device=result.device)


def compile_all(jobs: list[tuple], profile: CompileProfile | None = None) -> None:
    """Compile `jobs` (fn, args, sizes, grid, kwargs: `_Launch.compile_jobs`) at once: Triton's
    AsyncCompileMode runs the compiles in a thread pool (ptxas is a subprocess, LLVM releases
    the GIL), where one after another they were most of a cold compile (the GPT-2 block: 82
    compiles, ~17 s of 28, on the H200). A lone job is compiled here too, so that its compile
    is Triton compilation in `profile` rather than part of the launch that would compile it.
    Best effort: a config that fails to compile fails again, and loses, when it is timed."""
    if not jobs:
        return
    profile = profile if profile is not None else CompileProfile()
    for fn, args, sizes, _grid, kwargs in jobs:  # a config built before is a lookup in Triton's cache
        profile.distinct("triton_compiles", compile_key(fn, args, sizes, kwargs))
    with profile.part("triton_compile"):
        _compile_jobs(jobs)


def _compile_jobs(jobs: list[tuple]) -> None:
    import triton

    if len(jobs) == 1:
        fn, args, sizes, grid, kwargs = jobs[0]
        with contextlib.suppress(Exception):  # see compile_all
            fn.warmup(*args, *sizes, grid=grid, **kwargs)
        return
    async_mode = getattr(triton, "AsyncCompileMode", None)  # triton >= 3.4
    if async_mode is None:
        return
    from concurrent.futures import ThreadPoolExecutor

    mode = None
    try:
        with ThreadPoolExecutor(max_workers=min(len(jobs), COMPILE_THREADS)) as pool:
            mode = async_mode(pool)
            with mode:
                for fn, args, sizes, grid, kwargs in jobs:
                    fn.warmup(*args, *sizes, grid=grid, **kwargs)
    except Exception:  # noqa: BLE001, S110 - see compile_all
        pass
    finally:
        _leave_async_mode(mode)


def compile_key(fn, args, sizes, kwargs) -> tuple:
    """What Triton specializes one compile of `fn` on, roughly: the constexprs and launch options,
    the pointers' dtypes, and for each integer argument whether it is 1 or a multiple of 16."""
    dtypes = tuple(str(getattr(a, "dtype", type(a).__name__)) for a in args)
    ints = tuple((int(v) == 1, int(v) % 16 == 0) for v in sizes)
    return (id(fn), tuple(sorted(kwargs.items())), dtypes, ints)


def _leave_async_mode(mode) -> None:
    """Make sure `mode` is no longer Triton's active compile mode. Before triton 3.7 its __exit__
    cleared the mode only after every compile had succeeded: one candidate config that failed to
    compile (float16 on the H200, triton 3.6) left the mode active with its thread pool shut down,
    and every later Triton compile in the process failed with "cannot schedule new futures after
    shutdown"."""
    try:
        from triton.runtime import _async_compile
    except ImportError:
        return
    active = getattr(_async_compile, "active_mode", None)
    if mode is not None and active is not None and active.get() is mode:
        active.set(None)


# threads compiling one kernel's candidate configs (each mostly waits on ptxas or LLVM)
COMPILE_THREADS = max(1, min(8, (os.cpu_count() or 2) - 1))

# (kernel body digest, size bucket, device) -> index of the fastest config, for
# the life of the process: identical kernels (a model's repeated layers) are timed once
_TUNED: dict[tuple, int] = {}


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def _triton_version() -> str:
    import triton

    return triton.__version__


# ------------------------------------------------------------------ the program

class ProgramRunner:
    """A loaded Program: `runner(list_of_tensors) -> list[Tensor | None]`."""

    def __init__(self, program: Program, options: CompileOptions | None = None):
        options = options or CompileOptions()
        self.program = program
        self.name = program.name
        # the compile-time profile (pipec_ir.profile): what loading, compiling, tuning and the first
        # call cost, recorded while a window measures a model's first call (else nothing is kept)
        self.profile = options.get("compile_profile") or CompileProfile()
        self.first_call_pending = True  # the next call through __call__ is the program's first
        self.autotune = bool(options.autotune)
        self.kernel_dir = options.get("kernel_dir")
        # autotuning: results kept on disk per (kernel, size bucket, GPU) unless tuning_cache=False;
        # autotune_configs=N times only the first N candidates (1: no timing at all)
        self.tuning_cache = TuningCache(self.kernel_dir) if options.get("tuning_cache", True) else None
        self.autotune_configs = options.get("autotune_configs")
        if self.autotune_configs is not None and (
                not isinstance(self.autotune_configs, int) or self.autotune_configs < 1):
            raise ProgramLoadError(f"autotune_configs must be a positive integer, got {self.autotune_configs!r}")
        self.choice = options.get("choice")  # force this alternative in every choice group (choices.py)
        self.bucket_policy = options.get("bucket", "pow2")
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
        self.tuned: dict[tuple[str, tuple], int] = {}  # (kernel, size bucket) -> chosen config index

        self._bind_symbols()
        self._plan_inputs()
        self._plan_allocations()
        self._plan_release()
        self.out_index = tuple(None if o is None else self.index[o] for o in program.outputs)
        types = {b.name: b.type for b in (*program.inputs, *program.buffers)}
        self.output_shapes = tuple(None if o is None or o not in types else self._shape_fn(types[o].shape)
                                   for o in program.outputs)

        self._plans: dict[str, list] = {}
        self._launches: dict[str, list] = {}  # device type -> every launch of its plan (alternatives too)
        self._precompiled: set[tuple] = set()  # (device type, size bucket) whose first call compiled at once
        self.value_dtypes = {self.index[b.name]: TORCH_DTYPES[b.type.dtype]
                             for b in (*program.inputs, *program.buffers) if b.type.dtype in TORCH_DTYPES}
        self._schedules: dict[int, tuple[list, list]] = {}  # id(plan) -> (plan, allocation schedule)
        # symbol values -> (device, specialized run): see `specialize.py`
        self.specialized: dict[tuple, tuple] = {}
        self.specialize = bool(options.get("specialize", True))
        self._raw_stream = None
        self.choice_timer = "wall"  # how choice groups are timed (choices._timed); "graph" under CUDA Graphs
        self.default_device = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
        if self.default_device.type == "cpu":
            enable_interpreter()
        self._plans[self.default_device.type] = self._build(self.default_device.type)

    # ---------------------------------------------------------- load-time planning
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

    def _shape_fn(self, shape):
        if is_static(shape):
            shape = static_ints(shape)
            return lambda *symvals: shape
        return compile_ints(shape, self.symbols)

    def _plan_inputs(self) -> None:
        self.input_dtypes = tuple(TORCH_DTYPES[b.type.dtype] for b in self.program.inputs)
        self.input_shapes = tuple(self._shape_fn(b.type.shape) for b in self.program.inputs)
        self.static_shapes = not self.symbols
        # The inputs a kernel reads or writes, as dense row-major memory: `prepare` makes them
        # contiguous. The others reach only library calls and views (a backward graph's saved
        # transposed weights, attention's q, k and v), which take any strides: they pass as the
        # caller's tensors, as in eager, instead of being copied every call.
        touched = {n for s in self.program.steps if s.kind == "launch" for n in (*s.inputs, *s.outputs)}
        self.dense_inputs = frozenset(i for i, b in enumerate(self.program.inputs) if b.name in touched)

    def result_binds(self, step) -> tuple:
        """(output index, library result index, shape function, dtype) of each output `step`
        writes in place of a library call's result (`inplace` naming a value without a slot)."""
        return tuple((self.index[out], self.index[donor], self._shape_fn(self.buffers[out].type.shape),
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
                self.plain_allocs.append((self.index[name], self._shape_fn(b.type.shape), TORCH_DTYPES[b.type.dtype]))
            else:
                by_slot.setdefault(b.slot, []).append(b)
        self.slot_allocs = []
        for slot, bufs in sorted(by_slot.items()):
            sizes = [slots[slot].nbytes] + [buffer_nbytes(b) for b in bufs]
            nbytes = self._shape_fn(sizes)
            views = tuple((self.index[b.name], TORCH_DTYPES[b.type.dtype], self._shape_fn(b.type.shape),
                           self._shape_fn([buffer_nbytes(b)])) for b in bufs)
            self.slot_allocs.append((nbytes, views))

    def _bind_names(self, step) -> list[tuple[str, str]]:
        """(output, library result) pairs of a launch's `inplace` whose input has no slot."""
        if step.kind != "launch":
            return []
        names = []
        for out, donor in tuple(get_attr(step.attrs, "inplace", ()) or ()):
            d = self.buffers.get(donor)
            if out in self.buffers and d is not None and d.slot is None and donor not in self._input_names:
                names.append((out, donor))
        return names

    def _plan_release(self) -> None:
        """After step k, drop the values whose last use is step k (not outputs, not inputs)."""
        program = self.program
        keep = {o for o in program.outputs if o is not None} | {b.name for b in program.inputs}
        last: dict[str, int] = {}
        for k, s in enumerate(program.steps):
            for n in (*s.inputs, *s.outputs):
                last[n] = k
            for _, v in s.attrs:
                for ref in _refs(v):
                    last[ref] = k
        release: list[list[int]] = [[] for _ in program.steps]
        for n, k in last.items():
            if n not in keep and n in self.index:
                release[k].append(self.index[n])
        self.release = [tuple(r) for r in release]

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
                fn = load_kernel(kernel, interpret=interpret, cache_dir=self.kernel_dir)
                self.profile.distinct("kernels", (self.name, kernel.name))
                self.profile.distinct("unique_kernels", body_digest(kernel))  # identical layers: one
                fn = honour_debug(fn) if interpret else fn
                steps.append((_Launch(self, s, kernel, fn, interpret, tune), self.release[k]))
            elif s.kind == "extern":
                steps.append((_Extern(s, self.index, reads_by_launch, self.symbols), self.release[k]))
            else:
                raise ProgramLoadError(f"program {self.name}: step {k} has unknown kind {s.kind!r}")
        self._launches[device_type] = [step for step, _ in steps if isinstance(step, _Launch)]
        return group_choices(self, steps, tune, self.choice)

    def precompile_once(self, inputs: list, symvals: tuple, device: torch.device) -> None:
        """`_precompile` on the first call of each size bucket (all symbols) on each device type:
        a new bucket may bring new configs to time and new sizes to specialize for."""
        key = (device.type, self.bucket_key(symvals))
        if key not in self._precompiled:
            self._precompiled.add(key)
            self._precompile(inputs, symvals, device)

    def _precompile(self, inputs: list, symvals: tuple, device: torch.device) -> None:
        """Compile what the first call will compile, all at once (`compile_all`): every launch's
        candidate configs, those of every choice-group alternative included, which the steps
        would otherwise compile one launch after another. Values not made yet are stood in for by
        small tensors of their dtype: compiling reads only dtypes and alignment."""
        stand_ins: dict[torch.dtype, torch.Tensor] = {}

        def tensor(i: int):
            if i < len(inputs):
                return inputs[i]
            dtype = self.value_dtypes.get(i)
            if dtype is not None and dtype not in stand_ins:
                stand_ins[dtype] = torch.empty(16, dtype=dtype, device=device)
            return stand_ins.get(dtype)

        jobs, launches = [], 0
        for launch in self._launches.get(device.type, ()):
            args = [tensor(i) for i in launch.ptrs]
            if all(a is not None for a in args):
                found = launch.compile_jobs(launch.candidates(symvals, device), args, symvals)
                jobs += found
                launches += bool(found)
        if len(jobs) > 1:
            tuning_log.info("%s: compiling %d kernel configs of %d launches at once", self.name, len(jobs), launches)
        compile_all(jobs, self.profile)

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

    def run(self, inputs: list, symvals: tuple, device: torch.device, observe: dict | None = None) -> list:
        """Run the steps on prepared inputs; the program's outputs. `observe` (a dict) receives
        {value: (shape, stride, dtype)} of every tensor value the run made (views.py reads it)."""
        if device.type == "cpu" and not interpreter_active() and torch.cuda.is_available():
            return self._run_cpu_on_cuda(inputs, symvals)
        steps = self.steps_for(device)
        if device.type == "cuda" and not interpreter_active():
            with torch.cuda.device(device):
                self.precompile_once(inputs, symvals, device)
        schedule = self._allocation_schedule(steps)
        vals = [None] * self.nvals
        vals[:len(inputs)] = inputs
        args = (steps, schedule, vals, symvals, device, observe)
        if device.type == "cpu" and not interpreter_active():
            with interpreter_scope(True):
                self._run_steps(*args)
        elif device.type == "cuda" and device.index is not None and device.index != torch.cuda.current_device():
            with torch.cuda.device(device):
                self._run_steps(*args)
        else:
            self._run_steps(*args)
        if observe is not None:
            _observe(observe, range(self.nvals), vals)
        return [None if i is None else vals[i] for i in self.out_index]

    def _allocation_schedule(self, steps: list) -> list:
        """Per plan position, the allocations made just before it: each slot's storage (with
        the views of all its buffers) and each unslotted buffer where it is first written,
        so what the memory plan says is live is what is allocated (as in specialize.py)."""
        cached = self._schedules.get(id(steps))
        if cached is not None and cached[0] is steps:
            return cached[1]
        first: dict[int, int] = {}
        for k, (step, _) in enumerate(steps):
            alternatives = getattr(step, "alternatives", None)
            objs = [o for alt in alternatives.values() for o in alt] if alternatives else [step]
            for obj in objs:
                for i in getattr(obj, "allocates", getattr(obj, "writes", ())):
                    first.setdefault(i, k)
        schedule: list[list] = [[] for _ in steps] or [[]]
        for nbytes, views in self.slot_allocs:
            k = min(first.get(i, 0) for i, *_ in views)
            schedule[k].append((nbytes, views))
        for i, shape, dtype in self.plain_allocs:
            schedule[first.get(i, 0)].append((None, ((i, dtype, shape, None),)))
        self._schedules[id(steps)] = (steps, schedule)
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

    def _run_cpu_on_cuda(self, inputs: list, symvals: tuple) -> list:
        """CPU tensors on a machine with CUDA: the kernels run on the GPU, everything else as
        it would for CPU tensors, and the caller gets CPU tensors.

        Why not the interpreter here: before triton 3.7 the interpreter patches
        triton.language for good when it first runs a kernel, so every kernel compiled
        for the GPU afterwards in the same process fails to build.

        * Extern calls other than views run on the CPU (`_OnHost`): ops with only a CPU
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
            steps = self._plans["cpu-on-cuda"] = [(_OnHost(s, self.index) if _runs_on_host(s) else s, r)
                                                  for s, r in self.steps_for(cuda)]
        vals = [None] * self.nvals
        vals[:len(moved)] = moved
        self._run_steps(steps, self._allocation_schedule(steps), vals, symvals, cuda)
        return outputs_to_caller([None if i is None else vals[i] for i in self.out_index], moved, inputs)

    @classmethod
    def _run_steps(cls, steps, schedule, vals, symvals, device, observe: dict | None = None) -> None:
        if not steps:
            cls._allocate(schedule[0], vals, symvals, device)
        for (step, release), actions in zip(steps, schedule):
            if actions:
                cls._allocate(actions, vals, symvals, device)
            step(vals, symvals, device)
            if observe is not None:
                _observe(observe, release, vals)
            for i in release:
                vals[i] = None

    def __call__(self, inputs) -> list:
        if self.specialized:
            out = self._run_specialized(inputs)
            if out is not None:
                return out
        if self.first_call_pending:
            self.first_call_pending = False
            with self.profile.part("first_run"):
                return self(inputs)
        may_specialize = self.specialize and len(self.specialized) < MAX_SPECIALIZED
        strides = input_strides(inputs) if may_specialize else None  # before `prepare` copies any
        inputs, symvals, device = self.prepare(inputs)
        specialize = may_specialize and symvals not in self.specialized
        observed = {} if specialize else None  # the layouts the specialized run builds on
        out = self.run(inputs, symvals, device, observed)
        if specialize:
            self._specialize(symvals, device, observed, strides)
        return out

    def _run_specialized(self, inputs) -> list | None:
        """The specialized run for these inputs' sizes, or None (guards failed, other device)."""
        try:
            symvals = tuple([inputs[i].shape[d] for i, d in self.symbol_source])
        except (IndexError, AttributeError, TypeError):
            return None
        entry = self.specialized.get(symvals)
        if entry is None:
            return None
        device_index, run = entry
        if device_index < 0:
            return run(inputs, None)
        if torch._C._cuda_getDevice() != device_index or hooks_active():
            return None
        return run(inputs, self._raw_stream(device_index))

    def _specialize(self, symvals: tuple, device: torch.device, observed: dict | None = None,
                    strides: list | None = None) -> None:
        """Build the specialized run for `symvals` on `device` (a plain CUDA device that is the
        current one, or the CPU under the interpreter); other cases keep the general path.
        `strides`: per input, None if it was contiguous, else its strides (input_strides)."""
        from .specialize import build_specialized

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


def _observe(observed: dict, indices, vals) -> None:
    for i in indices:
        v = vals[i]
        if isinstance(v, torch.Tensor) and i not in observed:
            observed[i] = (tuple(v.shape), v.stride(), v.dtype)


def _size_symbols(value) -> set[str]:
    if isinstance(value, Size):
        return {s.name for s in value.value.free_symbols}
    if isinstance(value, tuple):
        return set().union(*(_size_symbols(v) for v in value)) if value else set()
    return set()


def _refs(value):
    if isinstance(value, Ref):
        yield value.name
    elif isinstance(value, tuple):
        for v in value:
            yield from _refs(v)


def load_launch(program: Program, options: CompileOptions | None = None) -> Callable[[list], list]:
    """The ``launch`` runtime's `load`: a callable list[Tensor] -> list[Tensor | None]."""
    return ProgramRunner(program, options)


__all__ = ["ProgramRunner", "ProgramLoadError", "load_launch", "resolve_target", "TORCH_DTYPES"]

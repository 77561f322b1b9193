"""Choice groups: steps that are alternatives of one computation (docs/IR.md, "Choice groups").

Codegen tags each step of an alternative with `choice` (the group's name) and
`alternative` (the alternative's name); one alternative's steps also carry
`default=True`. The steps of a group are consecutive and every alternative writes the
group's outputs, so running all of them in order is correct, only slower.

Here each group becomes one step that runs a single alternative:
- forced by the runtime option `choice` (an alternative name, e.g. "library"), where the
  group has one of that name;
- else, when autotuning on CUDA, the fastest one: each alternative runs once (compiling
  and tuning its own launches), its outputs are checked against the default's (one that
  disagrees beyond rounding is never picked, and a warning names it), is timed (`_timed`: GPU time under the CUDA Graph runtime,
  wall-clock time under `launch`), and the winner is kept per size bucket (the runner's
  bucket policy). A group identical to one timed before (`choice_digest`: the same kernels
  and extern calls on the same shapes: a model's repeated layers or another of its graphs,
  through the model's `TuningMemo`; a second compile or process, through the tuning cache)
  takes the same winner without timing again, so a warm compile runs exactly what the cold
  one ran;
- else (Triton's CPU interpreter, or autotune off) the default alternative.
"""

from __future__ import annotations

import hashlib
import math
import warnings

from pipec_ir import CompileProfile, Ref, get_attr

from .autotune import device_name, triton_version, tuning_log
from .graph_bench import GraphBench
from .kernels import body_digest
from .rounds import PRUNE, time_in_rounds
from .steps import ProgramLoadError
from .tuning_cache import tuning_key
from .tuning_table import choice_features, gpu_family, table_for

class ChoiceStep:
    """One choice group as one step of the runner's plan (specialize.py reads `alternatives`,
    `forced`, `tune`, `default`, `runner` and `chosen` to inline the picked alternative)."""

    __slots__ = ("runner", "name", "alternatives", "default", "tune", "forced", "chosen", "timings", "table_picks",
                 "profile", "_digest")

    def __init__(self, runner, name: str, alternatives: dict[str, list], default: str, tune: bool,
                 forced: str | None):
        self.runner, self.name, self.alternatives = runner, name, alternatives
        self.default, self.tune = default, tune
        self.forced = forced if forced in alternatives else None
        self.chosen: dict[tuple, str] = {}  # size bucket -> alternative
        self.timings: dict[tuple, dict[str, float]] = {}  # size bucket -> alternative -> ms
        self.table_picks: set[tuple] = set()  # size buckets whose alternative the tuning table chose, untimed
        self.profile = getattr(runner, "profile", None) or CompileProfile()  # the runner's (runner.py)
        self._digest: str | None = None  # choice_digest, made once (asked at load and at each decision)

    def pick(self, vals, symvals, device) -> str:
        if self.forced is not None:
            return self.forced
        if not self.tune or device.type != "cuda":
            return self.default
        bucket = self.runner.bucket_key(symvals) if self.runner.symbols else ()
        chosen = self.chosen.get(bucket)
        if chosen is None:
            chosen = self.chosen[bucket] = self._measure(vals, symvals, device, bucket)
        return chosen

    def known_pick(self, symvals, device) -> str | None:
        """The alternative a call at `symvals` on `device` will run, where it is decided without
        timing (forced, no autotuning, picked before, or known to the model's memo, the tuning
        cache or the tuning table); None where the alternatives still have to be timed. Nothing
        is recorded: the runner asks this to compile only the alternative that will run."""
        if self.forced is not None:
            return self.forced
        if not self.tune or device.type != "cuda":
            return self.default
        bucket = self.runner.bucket_key(symvals) if self.runner.symbols else ()
        if bucket in self.chosen:
            return self.chosen[bucket]
        found = self._lookup(symvals, device, bucket)
        return found[0][0] if found is not None else None

    def _keys(self, device, bucket) -> tuple[str, tuple, str | None]:
        """(timer, the model memo's key, the tuning cache's key or None without a tuning cache) of
        this group's decision in `bucket`."""
        timer = getattr(self.runner, "choice_timer", "wall")
        if self._digest is None:
            self._digest = choice_digest(self.runner, self.alternatives)
        digest = self._digest
        disk_key = (tuning_key(f"choice:{timer}:{digest}", bucket, device_name(device), triton_version())
                    if getattr(self.runner, "tuning_cache", None) is not None else None)
        return timer, (digest, bucket, str(device), timer), disk_key

    def _lookup(self, symvals, device, bucket) -> tuple[tuple[str, dict, bool], str] | None:
        """((alternative, its group's timings, from the tuning table?), where it was found: "memo",
        "cache" or "table") for this group's decision in `bucket`, or None: it must be timed."""
        timer, shared_key, disk_key = self._keys(device, bucket)
        known = self.runner.memo.choices.get(shared_key)  # the model's TuningMemo (autotune.py)
        if known is not None:
            return known, "memo"
        cache = getattr(self.runner, "tuning_cache", None)
        if disk_key is not None:
            names = sorted(self.alternatives)
            index = cache.get(disk_key, len(names))
            if index is not None:
                stored = cache.times(disk_key) or []
                return (names[index], {n: (math.inf if t is None else t) for n, t in zip(names, stored)}, False), "cache"
        table = table_for(self.runner, device)
        pick = table.pick(choice_features(self.runner, self.alternatives, symvals, timer)) if table else None
        return ((pick, {}, True), "table") if pick in self.alternatives else None

    def _measure(self, vals, symvals, device, bucket) -> str:
        found = self._lookup(symvals, device, bucket)
        if found is None:
            return self._timed_pick(vals, symvals, device, bucket)
        known, source = found
        if source == "table":
            self.profile.count("choices_from_table")
            tuning_log.info("choice %s: %s from the tuning table", self.name, known[0])
        memo = self.runner.memo
        memo.put(memo.choices, self._keys(device, bucket)[1], known)
        self.timings[bucket] = dict(known[1])
        if known[2]:
            self.table_picks.add(bucket)
        return known[0]

    def _timed_pick(self, vals, symvals, device, bucket) -> str:
        """Time the alternatives; keep the winner in the model's memo and the tuning cache."""
        timer, shared_key, disk_key = self._keys(device, bucket)
        with self.profile.part("autotune"):  # running an alternative first compiles and tunes its own launches
            chosen = self._time_alternatives(vals, symvals, device, bucket, timer)
        memo, cache, names = self.runner.memo, getattr(self.runner, "tuning_cache", None), sorted(self.alternatives)
        memo.put(memo.choices, shared_key, (chosen, dict(self.timings[bucket]), False))
        if disk_key is not None:
            learn = {"family": gpu_family(device), "features": choice_features(self.runner, self.alternatives, symvals, timer),
                     "labels": names}
            cache.put(disk_key, names.index(chosen), [self.timings[bucket].get(n, math.inf) for n in names], learn)
        return chosen

    def _time_alternatives(self, vals, symvals, device, bucket, timer: str) -> str:
        runs, times, first_error = {}, {}, None
        outputs, reference = shared_outputs(self.alternatives), None
        operands = operand_dtypes(self.alternatives, vals)
        order = sorted(self.alternatives, key=lambda n: n != self.default)  # the default first
        for name in order:
            def run(steps=self.alternatives[name]):
                _run(steps, vals, symvals, device)
            try:
                run()  # compiles, and tunes the configs of its own launches, before it is timed
            except Exception as e:  # noqa: BLE001 - an alternative that fails to build (resources) loses
                first_error = first_error or e
                times[name] = math.inf
                continue
            got = [vals[i] for i in outputs]
            if reference is None:  # what the others must agree with: the first that ran
                reference = (name, [t.clone() if hasattr(t, "clone") else t for t in got])
            else:
                why = disagreement(got, reference[1], operands)
                if why is not None:  # a wrong result is never picked, however fast
                    warnings.warn(f"pipec: alternative {name!r} of {self.name} disagrees with "
                                  f"{reference[0]!r} ({why}); it is not used", RuntimeWarning, stacklevel=2)
                    tuning_log.warning("choice %s: %s disagrees with %s (%s)", self.name, name, reference[0], why)
                    times[name] = math.inf
                    continue
            runs[name] = run
        if not runs:
            raise first_error
        self.profile.count("choice_groups_timed")
        self.profile.count("alternatives_timed", len(runs))
        times.update(_timed(runs, graphed=timer == "graph", prune=getattr(self.runner, "prune_timing", None)))
        self.timings[bucket] = times
        chosen = min(times, key=times.__getitem__)
        tuning_log.info("choice %s%s (%s time): %s; %s", self.name, f" bucket {bucket}" if bucket else "",
                        timer, chosen, " ".join(f"{n}={t:.4f}ms" for n, t in sorted(times.items())))
        return chosen

    def __call__(self, vals, symvals, device):
        name = self.pick(vals, symvals, device)
        try:
            _run(self.alternatives[name], vals, symvals, device)
        except Exception as e:
            bucket = self.runner.bucket_key(symvals) if self.runner.symbols else ()
            if self.forced is not None or bucket not in self.table_picks:
                raise
            # the table's pick does not run here (learned on another body that needed fewer
            # resources): time the alternatives, as without a table, and run the winner
            tuning_log.warning("choice %s: the tuning table's %s does not run here (%s: %s); timing the "
                               "alternatives", self.name, name, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
            self.runner.memo.choices.pop(self._keys(device, bucket)[1], None)
            self.table_picks.discard(bucket)
            name = self.chosen[bucket] = self._timed_pick(vals, symvals, device, bucket)
            _run(self.alternatives[name], vals, symvals, device)


def shared_outputs(alternatives: dict[str, list]) -> list[int]:
    """The value slots every alternative writes (the group's outputs; an alternative's own
    intermediates, such as cuBLAS's product before the pointwise kernel, are not among them)."""
    written = [set().union(*(getattr(s, "writes", None) or getattr(s, "outs", None) or () for s in steps))
               for steps in alternatives.values()]
    return sorted(set.intersection(*written)) if written else []


# How far an alternative's floating-point output may stray from the reference alternative's,
# relative to the largest magnitude in it: summation orders differ (tiles, split-K, fused
# epilogues), but a wrong tile or a garbage store is off by the output's own scale.
DISAGREEMENT = {"float16": 1e-2, "bfloat16": 2e-2, "float32": 1e-3, "float64": 1e-6}


def operand_dtypes(alternatives: dict[str, list], vals) -> frozenset[str]:
    """The dtypes of the floating-point tensors the alternatives' kernels read."""
    dtypes = set()
    for steps in alternatives.values():
        for step in steps:
            n = getattr(step, "n_inputs", None)
            for i in (step.ptrs[:n] if n is not None else ()):
                v = vals[i]
                if getattr(v, "is_floating_point", None) is not None and v.is_floating_point():
                    dtypes.add(str(v.dtype).removeprefix("torch."))
    return frozenset(dtypes)


def disagreement(got: list, want: list, operands=()) -> str | None:
    """Why the outputs `got` are not `want` (None when they agree, see DISAGREEMENT). An output
    is held to the looser of its own dtype's tolerance and its `operands`' (the dtypes the
    computation read): an fp32 logit of a bf16 product is as exact as the bf16 product, whether
    an alternative rounds the product to bf16 before its epilogue (cuBLAS then a pointwise
    kernel, as eager) or not (a fused epilogue on the fp32 accumulator); held to fp32's 1e-3,
    GPT-2's LM head lost its cuBLAS alternative to a Triton template 3.5 times slower."""
    import torch

    floor = max((DISAGREEMENT.get(d, 0.0) for d in operands), default=0.0)

    for i, (g, w) in enumerate(zip(got, want)):
        if not isinstance(w, torch.Tensor):
            continue
        if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.dtype != w.dtype:
            return f"output {i} has another shape or dtype"
        if not w.is_floating_point():
            if not torch.equal(g, w):
                return f"output {i} differs"
            continue
        if not w.numel():
            continue
        gf, wf = g.float(), w.float()
        same = (gf == wf) | (gf.isnan() & wf.isnan())
        worst = torch.where(same, 0.0, (gf - wf).abs().nan_to_num(nan=math.inf)).max().item()
        scale = max(1.0, wf.abs().nan_to_num(nan=0.0, posinf=0.0, neginf=0.0).max().item())
        if worst > max(floor, DISAGREEMENT.get(str(w.dtype).removeprefix("torch."), 0.0)) * scale:
            return f"output {i}: max error {worst:.3g} at scale {scale:.3g}"
    return None


# GPU time per call past which a group's alternatives are compared on GPU time under `launch` too
GPU_BOUND_MS = 0.02


def _timed(runs: dict, graphed: bool, prune: float | None = PRUNE) -> dict[str, float]:
    """Milliseconds per call of each run, GPU time where it decides:

    * `graphed` (the CUDA Graph runtime, whose replays cost no host time): GPU time alone, each
      run captured into a CUDA Graph once and replayed in every round (graph_bench.py); with
      host work in the loop a small GEMM's Python launch cost would decide instead of its
      kernels (a slower library GEMM beat a faster mm + pointwise kernel on wall time).
    * `launch`, when the fastest alternative keeps the GPU busy for GPU_BOUND_MS or more: GPU
      time as well. The host prepares the next launches while such a GEMM runs, so its host
      work is hidden, and a wall-clock loop of a short GEMM measures as much host jitter as
      kernel (wall-clock picks made the same model's run time differ between processes).
    (docs/performance.md, "Choice groups are timed on the GPU clock where it decides".)
    * `launch` with small GEMMs: wall-clock `do_bench`, host work included, since that is paid
      every call.
    An alternative that cannot be captured makes the whole group use `do_bench`, so every time
    compares like with like. Either way the alternatives are timed in rounds of alternating order
    (rounds.py: timed once each, one after another, the first ran on a cooler, faster GPU)."""
    from triton.testing import do_bench

    bench = GraphBench()
    try:
        gpu, errors = time_in_rounds(runs, bench, stop_on_error=True, prune=prune)
    finally:
        bench.close()  # no timing graph, nor the cuBLAS workspaces they cached, outlives it
    if errors:  # one is uncapturable (a host sync): time them all on the wall clock
        gpu = None
    if gpu is not None and (graphed or min(gpu.values()) >= GPU_BOUND_MS):
        return gpu
    return time_in_rounds(runs, lambda run: do_bench(run, warmup=1, rep=5), prune=prune)[0]


def choice_digest(runner, alternatives: dict[str, list]) -> str:
    """sha256 of what a choice group computes, independent of its graph's value names: per
    alternative its name, its kernels' bodies (`body_digest`) and its extern calls (target and
    arguments, each value named by its type), and the types of the values it reads and writes."""
    types = {b.name: b.type for b in (*runner.program.inputs, *runner.program.buffers)}
    name_of = {i: n for n, i in runner.index.items()}
    parts = []
    for name in sorted(alternatives):
        parts.append(f"alternative {name}")
        for obj in alternatives[name]:
            kernel = getattr(obj, "kernel", None)
            ir = getattr(obj, "ir", None)
            if kernel is not None:
                parts.append(f"launch {body_digest(kernel)} {[str(types.get(name_of.get(i))) for i in obj.ptrs]}")
            elif ir is not None:  # its arguments, not its attrs' group names (those name graph nodes)
                call = (get_attr(ir.attrs, "args", ()), get_attr(ir.attrs, "kwargs", ()))
                parts.append(f"extern {ir.target} {_typed(call, types)} {[str(types.get(v)) for v in ir.inputs]} "
                             f"{[str(types.get(v)) for v in ir.outputs]}")
            else:
                parts.append(repr(obj))
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def _typed(value, types: dict) -> str:
    """`value` with every reference to a graph value replaced by that value's type."""
    if isinstance(value, Ref):
        return f"<{types.get(value.name)}>"
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_typed(v, types) for v in value) + ")"
    return repr(value)


def _run(steps, vals, symvals, device) -> None:
    for step in steps:
        step(vals, symvals, device)


def group_choices(runner, steps: list, tune: bool, forced: str | None = None) -> list:
    """The runner's plan (`[(step, release), ...]`, one per Program step) with each choice group's
    steps replaced by one `ChoiceStep`, which releases what any of them released, after it runs."""
    program_steps = runner.program.steps
    members: dict[str, list[int]] = {}
    for k, s in enumerate(program_steps):
        group = get_attr(s.attrs, "choice")
        if group is not None:
            members.setdefault(group, []).append(k)
    if not members:
        return steps
    out, done = [], set()
    for k, (step, release) in enumerate(steps):
        group = get_attr(program_steps[k].attrs, "choice")
        if group is None:
            out.append((step, release))
            continue
        if group in done:
            continue
        done.add(group)
        idx = members[group]
        if idx != list(range(idx[0], idx[0] + len(idx))):
            raise ProgramLoadError(f"program {runner.name}: the steps of choice group {group!r} are not consecutive")
        alternatives: dict[str, list] = {}
        default = None
        for i in idx:
            attrs = program_steps[i].attrs
            alt = get_attr(attrs, "alternative")
            if alt is None:
                raise ProgramLoadError(f"program {runner.name}: step {i} of choice group {group!r} names no "
                                       "alternative")
            alternatives.setdefault(alt, []).append(steps[i][0])
            if get_attr(attrs, "default", False) and default is None:
                default = alt
        released = tuple(dict.fromkeys(r for i in idx for r in steps[i][1]))
        out.append((ChoiceStep(runner, group, alternatives, default or next(iter(alternatives)), tune, forced),
                    released))
    return out


def choices_made(runner) -> dict[str, dict]:
    """What each choice group of a loaded runner picked so far: {group: {"default", "chosen":
    {bucket: alternative}, "timings_ms": {bucket: {alternative: ms}}}} (for reports and benchmarks)."""
    report = {}
    for plan in runner.plans.values():
        for step, _ in plan:
            if isinstance(step, ChoiceStep):
                c = step
                report[c.name] = {
                    "default": c.default, "forced": c.forced,
                    "chosen": {str(b): a for b, a in c.chosen.items()},
                    "timings_ms": {str(b): t for b, t in c.timings.items()},
                }
    return report


__all__ = ["ChoiceStep", "group_choices", "choices_made"]

"""Compile a fuzz program through every stage (capture lowering → fusion → codegen → runtime).

Inference programs are traced with make_fx and pipec's decompositions (what AOTAutograd does
for Dynamo), skipping Dynamo itself: the fuzzer targets pipec's stages, and this keeps a
graph's round trip to a fraction of a second. Training programs, programs called at several
sizes and those marked `dynamo` go through `pipec.compile` (Dynamo, AOTAutograd, the backend's
glue); a graph that ran eagerly (past the recompile budget) fails the check, so a silent
fallback to eager cannot pass for a match.

Every output (and every input gradient) is compared with eager at the dtype's tolerances; one
outside them still passes when it is about as close to a float64 run of the same program as
eager's (pipec's float64 judgement, pipec/reference.py: within 1.5x eager's error plus the
dtype's slack), so a half-precision graph is judged by what pipec lost, not by how eager rounded.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import pipec
import pipec_ir
from fuzz_graphs import Program, make_inputs, run_program
from pipec import plugins
from pipec.pipeline import Session, compile_graph
from pipec.reference import close_enough, max_abs_difference
from pipec_capture import core_decompositions
from pipec_fusion import Heuristics, fusion_from_heuristics

POLICIES = ("none", "default", "aggressive")
RANDOM_FUSION = "fuzz-random"  # the fusion stage of policy "random:<seed>", seeded by option fuzz_seed
# eager and pipec round float32 differently once a graph chains many ops (fused in registers or
# stored between kernels): the fuzzer's float32 tolerance; half types use assert_close's own
TOLERANCES = {torch.float32: {"atol": 1e-4, "rtol": 1e-4}}


class RandomHeuristics(Heuristics):
    """Merges each legal pair, recomputes each stored value, or not, at random (a hash of the
    seed and the pair, so the same pair always gets the same answer): fusions that no preset
    makes, for legality and codegen to get right."""

    horizontal = True

    def __init__(self, seed: int):
        self.seed = seed
        self.name = f"random:{seed}"

    def _uniform(self, *key) -> float:
        digest = hashlib.blake2b(repr((self.seed, key)).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "little") / 2 ** 64

    def score(self, first, second, kind):
        if len(first.nodes) + len(second.nodes) > 128:
            return None
        u = self._uniform(first.nodes, second.nodes, kind)
        return None if u < 0.3 else u

    def recompute_stored(self, ops, read_bytes, stored_bytes):
        return self._uniform("stored", ops, read_bytes, stored_bytes) < 0.5


class RandomFusion:
    """The `fuzz-random` fusion stage: RandomHeuristics seeded by the option `fuzz_seed`."""

    def fuse(self, graph, options):
        seed = int(options.get("fuzz_seed", 0))
        return fusion_from_heuristics(RandomHeuristics(seed), f"random:{seed}").fuse(graph, options)


class _FuzzPlugin:
    @pipec_ir.hookimpl
    def pipec_register(self, registry):
        registry.add_fusion(RANDOM_FUSION, RandomFusion())


def _fusion_options(policy: str) -> dict:
    """pipec.compile's keywords for `policy` (registering the random stage when needed: a test
    elsewhere may have reset the plugins)."""
    if not policy.startswith("random:"):
        return {"fusion": policy}
    if RANDOM_FUSION not in plugins.get_registry().names("fusion"):
        plugins.register_plugin(_FuzzPlugin(), name="pipec-fuzz")
    return {"fusion": RANDOM_FUSION, "fuzz_seed": int(policy.split(":")[1])}


def _options(policy: str, bounds_check: bool, **more) -> pipec_ir.CompileOptions:
    kwargs = _fusion_options(policy)
    fusion = kwargs.pop("fusion")
    if bounds_check:
        kwargs["bounds_check"] = True
    return pipec_ir.CompileOptions(fusion=fusion, cache="none", **more).with_extra(**kwargs)


def compile_program(prog: Program, inputs, policy: str, bounds_check: bool = False):
    """(runtime callable, the fusion stage's kernels as pipec.pipeline.plan_units) of `prog`
    traced by make_fx, compiled under `policy`."""
    def fn(*xs):
        return run_program(prog, xs)

    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="fake")(*inputs)
    options = _options(policy, bounds_check).with_extra(graph_name="fuzz")
    session = Session()
    run = compile_graph(gm, inputs, options, session=session)
    return run, session.graphs[-1].units


def _judge(what: str, got, want, exact, dtype) -> None:
    """AssertionError unless `got` matches eager's `want` (or is about as close to float64 `exact`)."""
    if (got is None) != (want is None):
        raise AssertionError(f"{what}: pipec gives {'no' if got is None else 'a'} tensor, eager "
                             f"{'none' if want is None else 'one'}")
    if got is None:
        return
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{what}: pipec gives {got.dtype} {tuple(got.shape)}, eager {want.dtype} "
                             f"{tuple(want.shape)}")
    try:
        torch.testing.assert_close(got, want, equal_nan=True, **TOLERANCES.get(dtype, {}))
        return
    except AssertionError as exc:
        problem = f"{what}: {' '.join(str(exc).split())[:400]}"
    exact = exact()
    if exact is None:
        raise AssertionError(problem)
    ours, eagers = max_abs_difference(got, exact, math.inf), max_abs_difference(want, exact, math.inf)
    if not (close_enough(ours, eagers, dtype) or _half_close_enough(ours, eagers, exact, dtype)):
        raise AssertionError(f"{problem}; against float64 pipec is off by {ours:.3g}, eager by {eagers:.3g}")


def _half_close_enough(ours: float, eagers: float, exact, dtype) -> bool:
    """A graph of many bf16/fp16 ops rounds at other points in pipec than in eager: once, from
    fp32 registers, where ops are fused; wherever a kernel stores, where they are not (a linear
    is eager's one addmm, pipec's mm and bias add). Each rounding costs up to half a step of the
    value's scale, so pipec may lose twice what eager lost plus one step at the output's scale
    (a wrong index or op loses the value's whole magnitude)."""
    if dtype not in (torch.bfloat16, torch.float16) or not math.isfinite(ours):
        return False
    scale = float(exact.abs().nan_to_num(posinf=0.0, neginf=0.0).max()) if exact.numel() else 0.0
    return ours <= 2 * eagers + torch.finfo(dtype).eps * scale


def _float64(xs):
    return [x.detach().double().requires_grad_(x.requires_grad) for x in xs]


def _compare(prog: Program, policy: str, got, want, reference) -> None:
    """Raise AssertionError naming the policy and the program when any output differs."""
    dtype = getattr(torch, prog.dtype)
    if len(got) != len(want):
        raise AssertionError(f"policy {policy!r}: {len(got)} outputs, eager has {len(want)}\n{prog}")
    cache: dict = {}

    def exact(k):
        def get():
            if "v" not in cache:
                cache["v"] = reference()
            return cache["v"][k] if cache["v"] is not None else None
        return get

    for k, (g, e) in enumerate(zip(got, want)):
        what = f"output {k}" if k < len(prog.outputs) else f"gradient of input {k - len(prog.outputs)}"
        try:
            _judge(what, g, e, exact(k), dtype)
        except AssertionError as exc:
            raise AssertionError(f"policy {policy!r}, {exc}\nfor program:\n{prog}") from None


def _eager(prog: Program, inputs, cotangents):
    """Eager's outputs, then (training) the inputs' gradients for `cotangents`."""
    if not prog.train:
        with torch.no_grad():
            return list(run_program(prog, inputs, reference=True))
    xs = [x.detach().clone().requires_grad_() for x in inputs]
    outs = run_program(prog, xs, reference=True)
    return [o.detach() for o in outs] + _gradients(outs, xs, cotangents)


def _gradients(outs, xs, cotangents):
    pairs = [(o, c) for o, c in zip(outs, cotangents) if o.requires_grad]
    if not pairs:
        return [None] * len(xs)
    grads = torch.autograd.grad([o for o, _ in pairs], xs, [c.to(o.dtype) for o, c in pairs], allow_unused=True)
    return [None if g is None else g.detach() for g in grads]


def _cotangents(prog: Program, inputs, seed: int):
    """Fixed random output gradients (shapes from an eager run on meta tensors)."""
    if not prog.train:
        return []
    with torch.no_grad():
        outs = run_program(prog, [torch.empty_like(x, device="meta") for x in inputs])
    g = torch.Generator().manual_seed(seed + 1)
    return [torch.randn(o.shape, generator=g).to(o.dtype).to(inputs[0].device) for o in outs]


def _float64_run(prog: Program, inputs, cotangents):
    """The float64 outputs (and gradients) of the same program, or None where float64 fails."""
    def run():
        try:
            return _eager(prog, _float64(inputs), [c.double() for c in cotangents])
        except Exception:  # noqa: BLE001 - no float64 run: the comparison with eager stands
            return None
    return run


def _check_dynamo(prog: Program, policy: str, seed: int, device: str, bounds_check: bool) -> int:
    """`prog` through pipec.compile under `policy` (dynamic=True when it has further sizes),
    called at each of its sizes (and trained when prog.train): number of graphs compiled."""
    torch._dynamo.reset()  # every program is the same Python function: no cache entry may carry over

    def fn(*xs):
        return run_program(prog, xs)

    kwargs = _fusion_options(policy)
    if bounds_check:
        kwargs["bounds_check"] = True
    # recompile_limit: where Dynamo breaks the program's graph (torch 2.11 broke some float16 programs
    # into one frame per step), each `apply_step` frame recompiles per step; past pipec's default
    # budget of 8 the rest would run eagerly, untested (fuzz seed 503 on the H200 host's CPU)
    compiled = pipec.compile(fn, dynamic=True if prog.sizes else None, cache="none", recompile_limit=64, **kwargs)
    for call, shapes in enumerate((prog.input_shapes, *prog.sizes)):
        inputs = [t.to(device) for t in make_inputs(prog, seed + call, shapes)]
        cotangents = _cotangents(prog, inputs, seed + call)
        want = _eager(prog, inputs, cotangents)
        if prog.train:
            xs = [x.detach().clone().requires_grad_() for x in inputs]
            outs = compiled(*xs)
            got = [o.detach() for o in outs] + _gradients(outs, xs, cotangents)
        else:
            with torch.no_grad():
                got = list(compiled(*inputs))
        _compare(prog, f"{policy}, call {call} (inputs {[list(s) for s in shapes]})", got, want,
                 _float64_run(prog, inputs, cotangents))
    session = compiled.pipec_session
    if session.eager_graphs or not session.graphs:
        raise AssertionError(f"policy {policy!r}: pipec compiled {len(session.graphs)} graphs and ran "
                             f"{session.eager_graphs} eagerly\nfor program:\n{prog}")
    return len(session.graphs)


def check_program(prog: Program, seed: int = 0, policies=None, device: str = "cpu",
                  bounds_check: bool = False) -> dict[str, int]:
    """Compile under each policy (default: the program's), compare with eager on `device` (the
    CPU runs Triton's interpreter; a GPU runs the compiled kernels); returns per policy the
    number of pointwise and reduction kernels (make_fx programs) or of graphs (pipec.compile).
    `bounds_check`: kernels assert that every load and store stays inside its buffer."""
    policies = prog.policies if policies is None else policies
    if prog.through_dynamo:
        return {p: _check_dynamo(prog, p, seed, device, bounds_check) for p in policies}
    inputs = [t.to(device) for t in make_inputs(prog, seed)]
    expected = _eager(prog, inputs, [])
    counts = {}
    for policy in policies:
        run, units = compile_program(prog, inputs, policy, bounds_check)
        got = list(run(list(inputs)))
        _compare(prog, policy, got, expected, _float64_run(prog, inputs, []))
        counts[policy] = sum(1 for k in units if k["kind"] in ("pointwise", "reduction"))
    return counts

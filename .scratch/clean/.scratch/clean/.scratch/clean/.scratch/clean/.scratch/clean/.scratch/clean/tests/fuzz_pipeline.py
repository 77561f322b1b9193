"""Compile a fuzz program through every stage (capture lowering → fusion → codegen → runtime).

Tracing goes through make_fx with pipec's decompositions (what AOTAutograd does
for Dynamo), skipping Dynamo itself: the fuzzer targets pipec's stages, and this
keeps a graph's round trip to a fraction of a second.
"""

from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

import pipec_ir
from fuzz_graphs import Program, make_inputs, run_program
from pipec import plugins
from pipec_capture import core_decompositions, lower_graph

POLICIES = ("none", "default", "aggressive")


def _round_trip(doc, kind):
    return pipec_ir.verify(pipec_ir.loads(pipec_ir.dumps(doc), kind=kind))


def compile_program(prog: Program, inputs, policy: str):
    def fn(*xs):
        return run_program(prog, xs)

    gm = make_fx(fn, decomposition_table=core_decompositions(), tracing_mode="fake")(*inputs)
    registry = plugins.get_registry()
    options = pipec_ir.CompileOptions(fusion=policy)
    graph = _round_trip(lower_graph(gm, name="fuzz"), "graph")
    plan = _round_trip(registry.get("fusion", policy).fuse(graph, options), "kernel_plan")
    program = _round_trip(registry.get("codegen", "triton").generate(plan, options), "program")
    return registry.get("runtime", "launch").load(program, options), plan


def check_program(prog: Program, seed: int = 0, policies=POLICIES, device: str = "cpu") -> dict[str, int]:
    """Compile under each policy, compare with eager on `device` (the CPU runs Triton's
    interpreter; a GPU runs the compiled kernels); returns kernel counts per policy."""
    inputs = [t.to(device) for t in make_inputs(prog, seed)]
    expected = run_program(prog, inputs)
    counts = {}
    for policy in policies:
        run, plan = compile_program(prog, inputs, policy)
        got = run(list(inputs))
        assert len(got) == len(expected)
        for k, (g, e) in enumerate(zip(got, expected)):
            try:
                torch.testing.assert_close(g, e, atol=1e-4, rtol=1e-4, equal_nan=True)
            except AssertionError as exc:
                raise AssertionError(f"policy {policy!r}, output {k} differs for program:\n{prog}\n{exc}") from None
        counts[policy] = sum(1 for k in plan.kernels if k.kind in ("pointwise", "reduction"))
    return counts

"""Fusion policies for A/B runs in the benchmarks, registered in this process (no entry point).

    from policies import register_policies
    register_policies()
    pipec.compile(model, fusion="default-stored")

`default-stored`: policy `default` without recomputing stored values in the kernels that read
them (pipec_fusion/recompute_stored.py), i.e. what `default` did before that pass.
"""

from __future__ import annotations

POLICIES = ("default-stored",)


def register_policies() -> None:
    import pipec_ir
    from pipec.plugins import register_plugin
    from pipec_fusion import DefaultHeuristics, fusion_from_heuristics

    class DefaultStored(DefaultHeuristics):
        name = "default-stored"

        def recompute_stored(self, ops, read_bytes, stored_bytes):
            return False

    class BenchmarkPolicies:
        @pipec_ir.hookimpl
        def pipec_register(self, registry):
            stage = fusion_from_heuristics(DefaultStored())
            registry.add_fusion(stage.name, stage)

    register_plugin(BenchmarkPolicies(), name="benchmark-policies")

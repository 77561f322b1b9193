"""Fusion policy 'cautious': fuse a pointwise producer into a pointwise consumer, nothing else.

The policy's name is written once, on the Heuristics class: the stage and its registry
entry take it from there.
"""

import pipec_ir


def make_cautious():
    import pipec_fusion  # lazily: only when pipec asks for the registry

    class CautiousHeuristics(pipec_fusion.Heuristics):
        name = "cautious"

        def score(self, first, second, kind):
            if kind == "vertical" and first.kind == "pointwise" and second.kind == "pointwise":
                return 1.0
            return None

        def why_not(self, first, second, kind):
            return (f"heuristics: policy {self.name!r} fuses only pointwise -> pointwise "
                    f"(this is {first.kind} -> {second.kind}, {kind})")

    return pipec_fusion.fusion_from_heuristics(CautiousHeuristics())


@pipec_ir.hookimpl
def pipec_register(registry):
    stage = make_cautious()
    registry.add_fusion(stage.name, stage)

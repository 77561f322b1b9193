"""Entry point `fusion = "pipec_fusion.plugin"`: registers the built-in fusion presets."""

from __future__ import annotations

import pipec_ir

from . import preset
from .heuristics import PRESETS


@pipec_ir.hookimpl
def pipec_register(registry) -> None:
    for name in PRESETS:
        stage = preset(name)
        registry.add_fusion(stage.name, stage)

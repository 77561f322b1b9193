"""torch.compile's modes, as pipec reads them (README, "Modes").

| mode | runtime | tuning |
| --- | --- | --- |
| default | launch | every config of every kernel and every GEMM alternative is timed on the GPU |
| reduce-overhead | cudagraph | as default |
| max-autotune | cudagraph | exhaustive: `max_autotune=True`, nothing left out to save compile time |
| max-autotune-no-cudagraphs | launch | as max-autotune |

Exhaustive tuning is the codegen option `max_autotune`: a GEMM gets every alternative codegen can
write for it (the Gluon ping-pong kernel also where cuBLASLt's epilogue or a cheap epilogue makes
it unlikely to win, with every persistent config beside it), and the runtime times them all; it
cannot be combined with options that turn timing down (`autotune=False`, `autotune_configs`,
`choice`).
"""

from __future__ import annotations

from typing import Any

MODES = {"default": "launch", "reduce-overhead": "cudagraph", "max-autotune": "cudagraph",
         "max-autotune-no-cudagraphs": "launch"}  # mode -> the runtime it selects
EXHAUSTIVE_MODES = ("max-autotune", "max-autotune-no-cudagraphs")
# options that turn tuning down, and what each asks for
_LESS_TUNING = {"autotune": "autotune=False", "autotune_configs": "autotune_configs", "choice": "choice"}


def mode_options(mode: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` (pipec.compile's keywords) with what `mode` adds; ValueError for a mode that
    contradicts one of them."""
    if mode not in EXHAUSTIVE_MODES:
        return options
    clash = [_LESS_TUNING[k] for k in _LESS_TUNING
             if k in options and options[k] is not None and not (k == "autotune" and options[k])]
    if clash:
        raise ValueError(f"mode={mode!r} tunes every config and GEMM alternative; it cannot be combined "
                         f"with {', '.join(clash)} (use mode='default' for those)")
    return {**options, "max_autotune": True}


__all__ = ["EXHAUSTIVE_MODES", "MODES", "mode_options"]

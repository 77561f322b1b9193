"""The `pipec.fft_*_pairs` extern targets (IR 1.8; docs/IR.md, "FFTs on real pairs"), as
capture sees them: torch ops with a schema and a shape rule, so complex_pairs.py can put calls
to them in an ATen graph traced on fake tensors. A runtime defines what they compute (pipec's:
pipec_runtime_cudagraph/extern_ops.py); whichever of the two a process imports first defines
the schema, and each adds only its own part.

    fft_r2c_pairs(x, dim, normalization, onesided)       = view_as_real(_fft_r2c(x, ...))
    fft_c2c_pairs(z, dim, normalization, forward)        = view_as_real(_fft_c2c(view_as_complex(z), ...))
    fft_c2r_pairs(z, dim, normalization, last_dim_size)  = _fft_c2r(view_as_complex(z), ...)

`dim` counts the complex tensor's dims (the pairs' last dim is not one of them).
"""

from __future__ import annotations

import functools

import torch

SCHEMAS = {
    "fft_r2c_pairs": "fft_r2c_pairs(Tensor x, int[] dim, int normalization, bool onesided) -> Tensor",
    "fft_c2c_pairs": "fft_c2c_pairs(Tensor z, int[] dim, int normalization, bool forward) -> Tensor",
    "fft_c2r_pairs": "fft_c2r_pairs(Tensor z, int[] dim, int normalization, SymInt last_dim_size) -> Tensor",
}


def _r2c_shape(x, dim, normalization, onesided):
    shape = list(x.shape)
    last = dim[-1] % x.dim()
    if onesided:
        shape[last] = shape[last] // 2 + 1
    return x.new_empty([*shape, 2])


def _c2c_shape(z, dim, normalization, forward):
    return z.new_empty(z.shape)


def _c2r_shape(z, dim, normalization, last_dim_size):
    shape = list(z.shape[:-1])
    shape[dim[-1] % len(shape)] = last_dim_size
    return z.new_empty(shape)


_SHAPES = {"fft_r2c_pairs": _r2c_shape, "fft_c2c_pairs": _c2c_shape, "fft_c2r_pairs": _c2r_shape}


@functools.cache  # once per process; the cache keeps the library (and so the registrations) alive
def declare() -> torch.library.Library:
    """The three ops' schemas (unless a runtime defined them) and shape rules."""
    library = torch.library.Library("pipec", "FRAGMENT")
    for name, schema in SCHEMAS.items():
        if not hasattr(torch.ops.pipec, name):
            library.define(schema)
        torch.library.register_fake(f"pipec::{name}", _SHAPES[name], lib=library)
    return library

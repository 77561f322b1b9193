"""The `pipec.fft_*_pairs` extern targets (IR 1.8; docs/IR.md, "FFTs on real pairs").

The IR has no complex dtype: capture holds a complex tensor of shape S as the real tensor of
shape S + [2] that `view_as_real` gives (pipec_capture/complex_pairs.py). An FFT has no form on
those pairs in generated code; it is a library call (cuFFT on CUDA, as in eager and Inductor),
and these targets are ATen's three FFT kernels with their complex sides as pairs:

    fft_r2c_pairs(x, dim, normalization, onesided)        = view_as_real(_fft_r2c(x, ...))
    fft_c2c_pairs(z, dim, normalization, forward)         = view_as_real(_fft_c2c(view_as_complex(z), ...))
    fft_c2r_pairs(z, dim, normalization, last_dim_size)   = _fft_c2r(view_as_complex(z), ...)

`dim` counts the complex tensor's dims (without the pair dim). Both sides of the IR need them as
torch ops: capture emits calls to them in an ATen graph (traced on fake tensors), and a runtime
runs them. Each calls `register()`, which defines them once per process; the IR package itself
does not depend on torch, so this module imports it only when called.
"""

from __future__ import annotations

TARGETS = ("pipec.fft_r2c_pairs.default", "pipec.fft_c2c_pairs.default", "pipec.fft_c2r_pairs.default")

_SCHEMAS = {
    "fft_r2c_pairs": "fft_r2c_pairs(Tensor x, int[] dim, int normalization, bool onesided) -> Tensor",
    "fft_c2c_pairs": "fft_c2c_pairs(Tensor z, int[] dim, int normalization, bool forward) -> Tensor",
    "fft_c2r_pairs": "fft_c2r_pairs(Tensor z, int[] dim, int normalization, SymInt last_dim_size) -> Tensor",
}
_LIBRARY = None  # the torch.library.Library holding the definitions (kept alive here)


def _implementations():
    import torch

    aten = torch.ops.aten

    def complex_of(z):
        return torch.view_as_complex(z.contiguous())

    def r2c(x, dim, normalization, onesided):
        return torch.view_as_real(aten._fft_r2c.default(x, dim, normalization, onesided))

    def c2c(z, dim, normalization, forward):
        return torch.view_as_real(aten._fft_c2c.default(complex_of(z), dim, normalization, forward))

    def c2r(z, dim, normalization, last_dim_size):
        return aten._fft_c2r.default(complex_of(z), dim, normalization, last_dim_size)

    return {"fft_r2c_pairs": r2c, "fft_c2c_pairs": c2c, "fft_c2r_pairs": c2r}


def register() -> None:
    """Define the `pipec.fft_*_pairs` ops in this process, unless they are defined already."""
    global _LIBRARY
    import torch

    if _LIBRARY is not None or hasattr(torch.ops.pipec, "fft_c2c_pairs"):
        return
    library = torch.library.Library("pipec", "FRAGMENT")  # a runtime defines other pipec.* ops
    for name, fn in _implementations().items():
        library.define(_SCHEMAS[name])
        library.impl(name, fn, "CompositeExplicitAutograd")
        # the same ATen calls on fake tensors give the result's shape and dtype
        torch.library.register_fake(f"pipec::{name}", fn, lib=library)
    _LIBRARY = library

"""What Triton's CPU interpreter gets wrong, made right for the kernels pipec loads into it.

Three gaps, all in the interpreter only (the GPU compiles the same source correctly):

* ``libdevice``: ``triton.language.extra.libdevice`` holds stubs that the GPU compiler
  swaps for the backend's libdevice; the interpreter calls the stubs themselves, which
  return None (``'NoneType' object has no attribute 'to'``). A kernel module loaded for the
  interpreter gets `LIBDEVICE` bound as its ``libdevice`` instead (`bind_interpreter_math`):
  the same function names, computed by numpy on the interpreter's arrays, as the
  interpreter computes ``tl.exp``, ``tl.log`` and the rest.
* bf16 ``tl.dot``: the interpreter holds bf16 values as their uint16 bit patterns and
  multiplies those as integers (an error of ~1e10). `patch_interpreter` makes its
  ``create_dot`` widen bf16 operands to fp32 first (exact: a bf16 is the top half of an
  fp32), which is what the GPU's bf16 MMA does with its fp32 accumulator. It also makes the
  default fp32 -> bf16 conversion round to nearest even, as the GPU does (the interpreter
  truncates: a bf16 result one ulp off).

* a scalar kernel argument as a loop bound (``range(0, tl.cdiv(K, BLOCK_K))``): before
  triton 3.7 the interpreter's ``tensor.__index__`` is ``int()`` of a 1-element array, which
  numpy >= 2.4 refuses ("only 0-dimensional arrays can be converted to Python scalars");
  `patch_interpreter` gives it triton 3.7's squeezed form.

All lean on the interpreter's value representation (``tensor.handle.data``, a numpy
array; ``TensorHandle(data, dtype)``), stable across triton 3.x.
"""

from __future__ import annotations

import threading
import types

import numpy as np

_lock = threading.Lock()


def _handle_type():
    from triton.runtime.interpreter import TensorHandle

    return TensorHandle


def _elementwise(name: str, np_fn, arity: int):
    """A libdevice function computed by numpy: operands are interpreter tensors (or Python
    numbers); the result has the dtype of the first tensor operand, broadcast as Triton would."""

    def fn(*args, **_ignored):
        import triton.language as tl

        if len(args) != arity:
            raise TypeError(f"libdevice.{name} takes {arity} argument(s), got {len(args)}")
        tensors = [a for a in args if isinstance(a, tl.tensor)]
        if not tensors:
            raise TypeError(f"libdevice.{name}: no tensor operand")
        if any(t.handle.dtype.scalar == tl.bfloat16 for t in tensors):
            # held as uint16 bit patterns here; libdevice has no bf16 version on the GPU either
            raise TypeError(f"libdevice.{name}: a bfloat16 operand (compute in fp32)")
        first = next((t for t in tensors if t.handle.dtype.scalar.is_floating()), tensors[0])
        dtype = first.handle.dtype.scalar
        np_dtype = first.handle.data.dtype
        data = [a.handle.data if isinstance(a, tl.tensor) else np.asarray(a, dtype=np_dtype) for a in args]
        with np.errstate(all="ignore"):  # inf/nan results are the function's answer, as on the GPU
            out = np.asarray(np_fn(*data)).astype(np_dtype, copy=False)
        blocks = [a.type for a in tensors if a.type.is_block()]
        if blocks:
            shape = np.broadcast_shapes(*(tuple(int(d) for d in b.shape) for b in blocks))
            out = np.broadcast_to(out, shape).copy() if out.shape != shape else out
            ty = tl.block_type(dtype, list(shape))
        else:
            ty = dtype
        return tl.tensor(_handle_type()(out, dtype), ty)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"libdevice.{name} for Triton's interpreter (numpy)"
    return fn


# libdevice's name -> (numpy function, operand count): every libdevice function codegen emits
# (tests/test_interpreter_ops.py checks the templates of pointwise_ops.NEEDS_LIBDEVICE against it)
_FUNCTIONS = {
    "expm1": (np.expm1, 1),
    "log1p": (np.log1p, 1),
    "tan": (np.tan, 1),
    "atan": (np.arctan, 1),
    "asin": (np.arcsin, 1),
    "acos": (np.arccos, 1),
    "sinh": (np.sinh, 1),
    "cosh": (np.cosh, 1),
    "nearbyint": (np.rint, 1),  # round half to even, as torch.round
    "trunc": (np.trunc, 1),
    "pow": (np.power, 2),
    "atan2": (np.arctan2, 2),
    "fmod": (np.fmod, 2),
}

LIBDEVICE = types.SimpleNamespace(**{name: _elementwise(name, f, n) for name, (f, n) in _FUNCTIONS.items()})


def _bf16_to_fp32(handle):
    """An interpreter bf16 handle (uint16 bit patterns) as an fp32 one, exactly."""
    import triton.language as tl

    data = (np.asarray(handle.data).astype(np.uint32) << 16).view(np.float32)
    return _handle_type()(data, tl.float32)


def _fp32_to_bf16(handle):
    """fp32 -> bf16 rounded to nearest even (nan stays nan), as the GPU's conversion."""
    import triton.language as tl

    bits = np.asarray(handle.data, dtype=np.float32).view(np.uint32)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(handle.data)
    rounded = np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)
    return _handle_type()(rounded, tl.bfloat16)


def patch_interpreter() -> None:
    """Make the interpreter's ``create_dot`` widen bf16 operands to fp32 and its fp32 -> bf16
    conversion round to nearest even; idempotent. Other dtypes go through unchanged."""
    from triton.runtime import interpreter

    builder = getattr(interpreter, "InterpreterBuilder", None)
    if builder is None or getattr(builder, "_pipec_patched", False):
        return
    with _lock:
        if getattr(builder, "_pipec_patched", False):
            return
        import triton.language as tl

        original_dot, original_cast = builder.create_dot, builder.cast_impl

        def create_dot(self, a, b, d, *args, **kwargs):
            # bf16 x bf16 accumulates into fp32 (Triton refuses a bf16 out_dtype): only a, b
            a = _bf16_to_fp32(a) if a.dtype.scalar == tl.bfloat16 else a
            b = _bf16_to_fp32(b) if b.dtype.scalar == tl.bfloat16 else b
            return original_dot(self, a, b, d, *args, **kwargs)

        def cast_impl(self, src, dst_type):
            # the interpreter truncates; the GPU's default fp32 -> bf16 conversion rounds
            if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
                return _fp32_to_bf16(src)
            return original_cast(self, src, dst_type)

        builder.create_dot, builder.cast_impl = create_dot, cast_impl
        _squeeze_scalar_index(interpreter)
        builder._pipec_patched = True


def _squeeze_scalar_index(interpreter) -> None:
    """The interpreter's per-run patch of ``tl.tensor`` followed by an ``__index__`` that takes
    the one element of a scalar's array (restored with the rest of the run's patches)."""
    original = getattr(interpreter, "_patch_lang_tensor", None)
    if original is None:
        return

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    interpreter._patch_lang_tensor = patch_lang_tensor


def bind_interpreter_math(module) -> None:
    """Fit a kernel module loaded for the interpreter: its ``libdevice`` becomes `LIBDEVICE`
    and the interpreter's bf16 ``tl.dot`` and fp32 -> bf16 rounding are fixed."""
    patch_interpreter()
    if hasattr(module, "libdevice"):
        module.libdevice = LIBDEVICE

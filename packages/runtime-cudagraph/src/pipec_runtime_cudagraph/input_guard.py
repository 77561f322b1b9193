"""One C call that vouches for every input of a specialized run.

A specialized run (specialize.py) first checks each input's dtype, shape, device and layout in
generated Python, four attribute reads per tensor. A compiled optimizer step takes 1010 tensors
(BERT base's parameters, gradients and both moments): ~0.4 ms of Python a call on the CPU
machine, a third of the step's host time with its kernels skipped. Dynamo's `TensorGuards`
checks dtype, device, sizes and strides (and requires_grad and dispatch keys) of a whole list of
tensors in C++, ~4x faster. The run keeps its Python checks, and runs them only where the C
check says the inputs differ from those it last accepted: a check it cannot pass (a torch without
TensorGuards, a tensor whose requires_grad changed) costs a call, never a wrong answer. Inputs
that keep changing in what only the C check reads would rebuild it every call (~170 us for 1010
tensors): after LEARN_LIMIT rebuilds the run keeps its Python checks alone.
"""

from __future__ import annotations

try:
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # pragma: no cover - a torch without Dynamo's C guards: the Python checks alone
    TensorGuards = None

LEARN_LIMIT = 8


class InputSpec:
    """The Python check behind `InputGuard` for a replay function (cudagraph.py): every input's
    dtype, shape and device. A loop here rather than generated lines: a decoder's replay function
    is regenerated at every record, and these lines were over half of its source (a 16-layer
    Llama step: ~16,000 of ~29,000 characters, whose compile cost ~8 ms on a code-cache miss)."""

    __slots__ = ("expected", "device")

    def __init__(self, dtypes: list, shapes: list, device_index: int):
        self.expected = list(zip(dtypes, shapes))
        self.device = device_index

    def matches(self, inputs: list) -> bool:
        device = self.device
        for x, (dtype, shape) in zip(inputs, self.expected):
            if x.dtype is not dtype or x.shape != shape or x.get_device() != device:
                return False
        return True


def same_strides(inputs: list, indices: tuple, strides: tuple) -> bool:
    """Whether `inputs[i]` has `strides[k]` for each `i = indices[k]` (a replay's pinned inputs,
    checked once per input layout its C guard accepts)."""
    return all(inputs[i].stride() == s for i, s in zip(indices, strides))


class InputGuard:
    """Remembers the inputs a specialized run last accepted (`learn`, after its Python checks
    passed) and says whether new inputs match them in every property those checks read (`same`)."""

    __slots__ = ("_accepted", "_learned")

    def __init__(self) -> None:
        self._accepted = None
        self._learned = 0

    def same(self, inputs: list) -> bool:
        accepted = self._accepted
        return accepted is not None and accepted.check(*inputs)

    def learn(self, inputs: list) -> None:
        if TensorGuards is None or self._learned >= LEARN_LIMIT:
            self._accepted = None
            return
        self._learned += 1
        try:
            self._accepted = TensorGuards(*inputs, dynamic_dims_sizes=None, dynamic_dims_strides=None)
        except Exception:  # noqa: BLE001 - an input it cannot describe: the Python checks every call
            self._accepted = None


__all__ = ["InputGuard", "InputSpec", "same_strides"]

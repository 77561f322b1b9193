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


__all__ = ["InputGuard"]

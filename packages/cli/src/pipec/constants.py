"""Tensor constants of a captured graph, bound to its compiled callable.

A graph can hold tensors of its own: `torch.tensor([0, 2, 5])` built inside `forward`, or the
`torch.tensor([])` with which transformers' KV cache starts each layer. Capture turns each
larger-than-scalar one into a graph input (role "buffer", docs/IR.md) so that tensor data never
enters the IR; the caller of the compiled graph does not pass them, so they are bound here.
The values are read from the graph module at compile time, never from the compile cache, so a
cached plan always runs with this graph's constants.
"""

from __future__ import annotations

from collections.abc import Callable

import pipec_ir

from .errors import PipecError
from .graph_call import Layer


def graph_constants(capture_impl, source, graph: pipec_ir.Graph) -> dict:
    """{graph input name: tensor} of the inputs `capture_impl` made of `source`'s own tensors."""
    find = getattr(capture_impl, "constants", None)
    if find is None or not any(i.role == "buffer" for i in graph.inputs):
        return {}
    return dict(find(source, graph))


def bind_constants(fn: Callable, graph: pipec_ir.Graph, constants: dict) -> Callable:
    """`fn(all graph inputs)` as `call(inputs without the constants)`: each constant goes in at
    its position, moved once to the device of the call's first tensor where it differs (a
    constant built on the CPU indexing a CUDA tensor, which eager accepts)."""
    if not constants:
        return fn
    positions = [k for k, i in enumerate(graph.inputs) if i.name in constants]
    values = [constants[graph.inputs[k].name] for k in positions]
    return BoundConstants(fn, graph.name, positions, values, len(graph.inputs) - len(positions))


class BoundConstants(Layer):
    def __init__(self, inner: Callable, graph_name: str, positions: list[int], values: list, expected: int) -> None:
        self.inner, self.graph_name, self.positions, self.values = inner, graph_name, positions, values
        self.expected = expected
        self._moved: dict = {}  # (constant, device) -> the constant on that device

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_moved": {}}

    def _on_device(self, n: int, value, device):
        if device is None or value.device == device:
            return value
        key = (n, str(device))
        if key not in self._moved:
            self._moved[key] = value.to(device)
        return self._moved[key]

    def __call__(self, args):
        args = list(args)
        if len(args) != self.expected:
            raise PipecError(f"graph {self.graph_name}: expected {self.expected} inputs "
                             f"(and {len(self.positions)} tensor constants of its own), got {len(args)}",
                             stage="runtime", graph=self.graph_name)
        device = next((a.device for a in args if hasattr(a, "device")), None)
        for n, (k, value) in enumerate(zip(self.positions, self.values)):
            args.insert(k, self._on_device(n, value, device))
        return self.inner(args)

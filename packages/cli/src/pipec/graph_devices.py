"""The devices a Dynamo graph's tensors live on, kept when pipec runs it.

A Program has no devices: the runtime runs every step on the device its tensor inputs are on
(the first GPU tensor's, CPU tensors beside it moving there as ATen moves them), and on its own
default device when it has no tensor input. A graph's tensors can be elsewhere:

* a graph whose inputs are only sizes (a graph break cut the tensors away: `torch.arange(n,
  device="cuda")`) gets one placeholder tensor per size (`graph_call.tensors_only`); made on the CPU,
  they sent the whole graph to Triton's CPU interpreter, and its CUDA outputs came back on the
  CPU (an extern `gather` in the next graph then failed: "index is on cpu");
* a graph reading only CPU tensors (a 0-dim CPU scalar) that makes CUDA tensors;
* a graph that makes a CPU tensor beside its CUDA work, or makes only CPU tensors while the
  runtime's default is the GPU.

`compute_device` reads the device the graph computes on from the values Dynamo/AOTAutograd
recorded; `on_graph_devices` wraps the runtime's callable only where what the runtime would do
differs from the graph: CPU inputs moved to the compute device, and outputs moved to the device
the graph gives them. Graphs on one device (nearly all) are returned unwrapped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .graph_call import Layer


def _tensor_vals(val):
    import torch

    if isinstance(val, torch.Tensor):
        yield val
    elif isinstance(val, (tuple, list)):
        for v in val:
            yield from _tensor_vals(v)


def compute_device(gm):
    """The device the graph's work runs on: the first non-CPU device among the values its nodes
    compute, else among its inputs, else the CPU. None when no value was recorded."""
    import torch

    computed, placeholders, seen = None, None, False
    for node in gm.graph.nodes:
        for t in _tensor_vals(node.meta.get("val")):
            seen = True
            if t.device.type == "cpu":
                continue
            if node.op == "placeholder":
                placeholders = placeholders or t.device
            elif node.op != "output":
                computed = computed or t.device
    if not seen:
        return None
    return computed or placeholders or torch.device("cpu")


def output_devices(gm) -> list:
    """The device of each output of the graph (None where it is not a tensor or not recorded)."""
    import torch

    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)
    devices = []
    for o in outs:
        val = o.meta.get("val") if isinstance(o, torch.fx.Node) else None
        devices.append(val.device if isinstance(val, torch.Tensor) else None)
    return devices


def runtime_device(input_devices: Sequence):
    """The device a runtime runs on for tensor inputs on `input_devices` (not empty): the first
    GPU input's, else the CPU (the rule of docs/IR.md, "Program")."""
    return next((d for d in input_devices if d.type != "cpu"), input_devices[0])


def on_graph_devices(fn: Callable, gm, example_inputs: Sequence, device) -> Callable:
    """`fn` (the runtime's callable, taking the graph's args) made to compute on `device` and to
    return each output on the device the graph gives it (module docstring); `fn` itself where
    the runtime does that already. A graph without any input runs on the runtime's own default
    device: each output that comes back elsewhere than the graph made it is moved."""
    import torch

    if device is None:
        return fn
    tensors = [i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor)]
    sizes_only = not tensors and any(isinstance(x, torch.SymInt) for x in example_inputs)
    if sizes_only:  # its placeholder tensors are made on `device` (graph_call.tensors_only)
        runs_on = device
    elif tensors:
        runs_on = runtime_device([example_inputs[i].device for i in tensors])
    else:  # no input at all: the runtime's own default
        runs_on = None
    move_in = [i for i in tensors if example_inputs[i].device.type == "cpu"] if runs_on not in (None, device) else []
    lands = device if move_in else runs_on  # where the runtime's outputs come out
    move_out = {k: d for k, d in enumerate(output_devices(gm)) if d is not None and d != lands}
    if not move_in and not move_out:
        return fn
    return OnGraphDevices(fn, move_in, device, move_out)


class OnGraphDevices(Layer):
    def __init__(self, inner: Callable, move_in: list[int], device, move_out: dict) -> None:
        self.inner, self.move_in, self.device, self.move_out = inner, move_in, device, move_out

    def __call__(self, args):
        import torch

        if self.move_in:
            args = list(args)
            for i in self.move_in:
                args[i] = args[i].to(self.device)
        out = list(self.inner(args))
        for k, d in self.move_out.items():
            if isinstance(out[k], torch.Tensor) and out[k].device != d:
                out[k] = out[k].to(d)
        return out


__all__ = ["OnGraphDevices", "compute_device", "on_graph_devices", "output_devices", "runtime_device"]

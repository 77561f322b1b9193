"""Test helpers: build Graphs/plans by hand and run generated kernels (GPU, or Triton's interpreter)."""

import importlib.util
import os
import sys
import tempfile

import pytest

import sympy  # noqa: E402
import torch  # noqa: E402

# Kernels run on the GPU when there is one, else in Triton's interpreter (set before triton is imported).
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ.setdefault("TRITON_INTERPRET", "1")
from pipec_ir import Graph, GraphInput, Kernel, Node, TensorType, make_attrs  # noqa: E402

DT = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int64": torch.int64,
      "bool": torch.bool, "int32": torch.int32}


class Builder:
    def __init__(self):
        self.inputs, self.nodes = [], []

    def input(self, name, shape, dtype="float32"):
        self.inputs.append(GraphInput(name, TensorType(tuple(sympy.Integer(s) for s in shape), dtype)))
        return name

    def node(self, name, op, inputs, shape, dtype="float32", **attrs):
        self.nodes.append(Node(name, op, tuple(inputs), TensorType(tuple(sympy.Integer(s) for s in shape), dtype),
                               make_attrs(**attrs)))
        return name

    def graph(self, outputs):
        return Graph("g", tuple(self.inputs), tuple(self.nodes), tuple(outputs))


def kernel(name, kind, nodes, inputs, outputs, domain, reduce_dims=()):
    return Kernel(name, kind, tuple(nodes), tuple(outputs), tuple(inputs),
                  tuple(sympy.Integer(d) for d in domain), tuple(reduce_dims))


def run_program(program, tensors, constants=None):
    """A minimal launcher (the real one lives in the runtime stage); `constants` overrides
    block sizes of the first config (e.g. a small RBLOCK, to loop over a short row)."""
    import triton

    env = dict(zip([b.name for b in program.inputs], [t.to(DEVICE) for t in tensors]))
    kernels = {}
    for k in program.kernels:
        path = os.path.join(tempfile.mkdtemp(), f"{k.name}.py")
        with open(path, "w") as f:
            f.write(k.source)
        spec = importlib.util.spec_from_file_location(k.name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[k.name] = mod
        spec.loader.exec_module(mod)
        kernels[k.name] = (k, getattr(mod, k.name))
    types = {b.name: b.type for b in program.buffers}
    for step in program.steps:
        if step.kind == "launch":
            k, fn = kernels[step.target]
            for o in step.outputs:  # allocated where first written (a scatter's two launches share it)
                if o in env:
                    continue
                env[o] = torch.empty([int(s) for s in types[o].shape], dtype=DT[types[o].dtype], device=DEVICE)
            cfg = dict(k.configs[0].constants)
            cfg.update({n: v for n, v in (constants or {}).items() if n in cfg})
            grid = tuple(triton.cdiv(int(e), cfg[n]) if n else int(e) for e, n in k.grid)
            fn[grid](*[env[i] for i in step.inputs], *[env[o] for o in step.outputs],
                     *[int(v) for _, v in k.sizes], **cfg)
        else:
            from pipec_ir import Ref, get_attr
            op = torch.ops.aten
            for part in step.target.split(".")[1:]:
                op = getattr(op, part)
            args = [env[a.name] if isinstance(a, Ref) else (list(a) if isinstance(a, tuple) else a)
                    for a in get_attr(step.attrs, "args")]
            result = op(*args)
            results = result if isinstance(result, tuple | list) else (result,)
            for name, value in zip(step.outputs, results):
                env[name] = value.contiguous() if isinstance(value, torch.Tensor) else value
    return [env[o].cpu() for o in program.outputs]


@pytest.fixture
def builder():
    return Builder()

"""Small fake stage implementations (a pipec plugin module) so the cli package is testable alone.

They speak real pipec IR: capture turns a Dynamo/fx graph of a few pointwise
torch ops into a Graph, fusion puts every node into one kernel, codegen writes a
Program of extern steps (plus one Triton-looking source for --output-code), and
the runtime interprets those steps with torch. Names mirror the built-ins
(dynamo/export, default/none, triton, launch/cudagraph) so CLI defaults work,
plus stages that misbehave on purpose: fusion "crash", fusion "invalid",
runtime "wrong" (off by one).
"""

from __future__ import annotations

import operator

import sympy
import torch

import pipec_ir
from pipec_ir import (Buffer, Graph, GraphInput, Kernel, KernelPlan, LaunchConfig, Node, Program,
                      RejectedFusion, Step, TensorType, TritonKernel)

_OPS = {
    operator.add: "add", torch.add: "add", operator.mul: "mul", torch.mul: "mul",
    operator.sub: "sub", torch.sub: "sub", torch.relu: "relu", torch.sigmoid: "sigmoid",
    torch.nn.functional.relu: "relu", operator.neg: "neg", torch.neg: "neg",
}
_TORCH = {"add": torch.add, "mul": torch.mul, "sub": torch.sub, "relu": torch.relu, "sigmoid": torch.sigmoid,
          "neg": torch.neg}
_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16"}


def _type(t: torch.Tensor) -> TensorType:
    return TensorType(tuple(sympy.Integer(s) for s in t.shape), _DTYPES[t.dtype])


def graph_from_fx(gm: torch.fx.GraphModule, example_inputs, name: str = "fake") -> Graph:
    inputs, nodes, outputs, types, names = [], [], [], {}, {}
    placeholders = iter(example_inputs)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            t = next(placeholders)
            names[n] = f"arg{len(inputs)}"
            types[names[n]] = _type(t)
            inputs.append(GraphInput(names[n], types[names[n]]))
        elif n.op == "call_function":
            op = _OPS.get(n.target)
            if op is None:
                raise NotImplementedError(f"fake capture has no lowering for {n.target}")
            args = [names[a] for a in n.args]
            names[n] = n.name
            types[n.name] = types[args[0]]
            nodes.append(Node(n.name, op, tuple(args), types[args[0]]))
        elif n.op == "output":
            outs = n.args[0] if isinstance(n.args[0], (tuple, list)) else (n.args[0],)
            outputs = [names[o] for o in outs]
        else:
            raise NotImplementedError(f"fake capture cannot handle {n.op}")
    return Graph(name, tuple(inputs), tuple(nodes), tuple(outputs))


class FakeCapture:
    def capture(self, gm, example_inputs, options):
        if not isinstance(gm, torch.fx.GraphModule):  # "export" gets the model itself
            gm = torch.fx.symbolic_trace(gm)
        return graph_from_fx(gm, example_inputs)

    def dynamo_backend(self, compile_aten_graph):
        def backend(gm, example_inputs):
            fn = compile_aten_graph(gm, example_inputs, "inference")
            return lambda *args: tuple(fn(list(args)))
        return backend


class FakeFusion:
    def __init__(self, mode: str = "ok"):
        self.mode = mode

    def fuse(self, graph, options):
        if self.mode == "crash":
            raise RuntimeError("fake fusion crashed\nsecond line of detail")
        names = tuple(n.name for n in graph.nodes)
        kernel = Kernel("fake_kernel_0", "pointwise", names, tuple(o for o in graph.outputs if o in names),
                        tuple(i.name for i in graph.inputs), graph.nodes[0].type.shape if graph.nodes else ())
        kernels = (kernel,)
        if self.mode == "invalid":
            kernels = (Kernel("k", "pointwise", ("no_such_node",), (), ()),)
        rejected = (RejectedFusion(names[0], names[-1], "fake: just because"),) if len(names) > 1 else ()
        return KernelPlan(graph, "fake", kernels, (), rejected)


class FakeCodegen:
    def generate(self, plan, options):
        g = plan.graph
        source = "import triton\n\n@triton.jit\ndef fake_kernel_0(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):\n    pass\n"
        kernel = TritonKernel("fake_kernel_0", source, ("in_ptr0", "out_ptr0"), (), (),
                              (LaunchConfig((("XBLOCK", 128),)),))
        steps = tuple(Step("extern", f"fake.{n.op}", n.inputs, (n.name,)) for n in g.nodes)
        return Program(g.name, tuple(Buffer(i.name, i.type) for i in g.inputs), g.outputs,
                       tuple(Buffer(n.name, n.type) for n in g.nodes), (kernel,), steps)


class FakeRuntime:
    def __init__(self, offset: float = 0.0):
        self.offset = offset

    def load(self, program, options):
        def run(args):
            env = {b.name: a for b, a in zip(program.inputs, args)}
            for s in program.steps:
                env[s.outputs[0]] = _TORCH[s.target.split(".")[1]](*(env[i] for i in s.inputs))
            return [env[o] + self.offset if o is not None else None for o in program.outputs]
        return run


@pipec_ir.hookimpl
def pipec_register(registry):
    for name in ("dynamo", "export"):
        registry.add_capture(name, FakeCapture())
    for name in ("default", "none"):
        registry.add_fusion(name, FakeFusion())
    registry.add_fusion("crash", FakeFusion("crash"))
    registry.add_fusion("invalid", FakeFusion("invalid"))
    registry.add_codegen("triton", FakeCodegen())
    for name in ("launch", "cudagraph"):
        registry.add_runtime(name, FakeRuntime())
    registry.add_runtime("wrong", FakeRuntime(offset=1.0))

"""On a CUDA machine: the examples captured from CUDA tensors (flash/efficient attention externs)."""

import pytest
import torch

import pipec_ir

from conftest import dynamo_capture, load_example

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("name", ["mlp_gelu", "norm_softmax", "gpt2_block"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cuda_examples(name, dtype):
    ex = load_example(name)
    model = ex.model.to("cuda", dtype)
    try:
        inputs = tuple(x.to("cuda", dtype) for x in ex.example_inputs())
        tol = None if dtype == torch.float32 else dict(atol=3e-2, rtol=3e-2)
        # the backend checks run_graph(lowered graph) against the ATen graph on every call
        out, records = dynamo_capture(model, inputs, tol=tol)
        assert records
        for graph, _, _ in records:
            assert pipec_ir.loads(pipec_ir.dumps(graph)) == graph
            print(name, dtype, sorted({n.attr("target") for n in graph.nodes if n.op == "extern"}))
    finally:
        model.to("cpu", torch.float32)

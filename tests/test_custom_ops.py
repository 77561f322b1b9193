"""An op a library registers through torch.library in its own namespace (transformers'
`grouped_mm_fallback` in every mixture of experts, torchvision's `nms`) is opaque by design:
it runs through torch as an extern call with reason "custom op", listed by `explain`, without a
warning, and it is allowed under fullgraph, as a vendor library call is."""

import warnings

import torch

import pipec
from pipec.errors import PipecFallbackWarning


@torch.library.custom_op("pipec_test::scaled_rows", mutates_args=())
def scaled_rows(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * scale[:, None]


@scaled_rows.register_fake
def _(x, scale):
    return torch.empty_like(x)


def block(x, scale):
    return torch.tanh(scaled_rows(torch.relu(x) + 1, scale)) * 2


def test_a_custom_op_is_an_extern_call_without_a_warning():
    x, scale = torch.randn(6, 10), torch.rand(6)
    for fullgraph in (False, True):
        torch._dynamo.reset()
        with warnings.catch_warnings():
            warnings.simplefilter("error", PipecFallbackWarning)
            got = pipec.compile(block, fullgraph=fullgraph)(x, scale)
        torch.testing.assert_close(got, block(x, scale))
    report = pipec.explain(block, x, scale)
    assert report.extern_ops == {"pipec_test.scaled_rows.default": "custom op"}, report.extern_ops
    assert report.kernel_count >= 2  # the relu chain before it and the tanh chain after it

"""torch's own checks of data inside a graph (aten._assert_async.msg, from one_hot's "index in
range"): the op returns nothing, yet the graph compiles (Switch Transformers', DBRX's and
LongT5's routers ran eagerly as a whole before) and the check still raises as eager does."""

import warnings

import pytest
import torch
import torch.nn.functional as F

import pipec

X = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))


def route(x, index):
    return F.one_hot(index, num_classes=6).to(x.dtype) * x.softmax(-1) + 1


@pytest.mark.parametrize("fullgraph", [False, True])
def test_one_hot_compiles_and_its_check_still_raises(fullgraph):
    torch._dynamo.reset()
    compiled = pipec.compile(route, fullgraph=fullgraph, cache="none")
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)  # no graph may run eagerly
        got = compiled(X, torch.tensor([0, 5, 2, 2]))
    torch.testing.assert_close(got, route(X, torch.tensor([0, 5, 2, 2])))
    report = pipec.explain(route, X, torch.tensor([0, 5, 2, 2]))
    assert report.mismatch is None and report.extern_ops.get("aten._assert_async.msg") == "library"
    with pytest.raises(RuntimeError, match="smaller than num_classes"):
        compiled(X, torch.tensor([0, 6, 2, 2]))

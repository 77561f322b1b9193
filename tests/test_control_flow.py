"""Control flow that Dynamo keeps as a higher-order op (`torch.cond`): pipec has no lowering for
it, so the graph runs eagerly, with eager's result and a warning naming the op; under
fullgraph the compile fails with that reason."""

import pytest
import torch

import pipec


def branch(x):
    return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,)) + 1


@pytest.mark.parametrize("sign", [1, -1])
def test_cond_runs_eagerly_with_a_warning_naming_it(sign):
    x = sign * (torch.rand(4, 5) + 0.1)
    torch._dynamo.reset()
    with pytest.warns(pipec.PipecFallbackWarning, match="higher-order op cond"):
        got = pipec.compile(branch)(x)
    torch.testing.assert_close(got, branch(x))


def test_cond_under_fullgraph_is_an_error_naming_it():
    torch._dynamo.reset()
    with pytest.raises(Exception, match="higher-order op cond"):
        pipec.compile(branch, fullgraph=True)(torch.ones(3))

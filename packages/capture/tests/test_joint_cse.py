"""pipec's CSE of joint graphs (joint_cse.py) against torch's own, which it replaces before the
min-cut partition: on real joint graphs the two must give the same graph, node for node."""

import copy

import pytest
import torch
from functorch.compile import aot_function, aot_module, default_partition, make_boxed_func

from pipec_capture.joint_cse import joint_graph_cse


def joint_graph(fn, *args, module=False) -> torch.fx.GraphModule:
    """The joint forward-backward graph AOTAutograd builds for one training call of `fn`."""
    joints = []

    def record(joint, joint_inputs, **kwargs):
        joints.append(copy.deepcopy(joint))
        return default_partition(joint, joint_inputs, **kwargs)

    compiler = lambda gm, _: make_boxed_func(gm)  # noqa: E731
    compiled = (aot_module if module else aot_function)(fn, fw_compiler=compiler, partition_fn=record)
    out = compiled(*args)
    (out if isinstance(out, torch.Tensor) else out[0]).sum().backward()
    return joints[0]


def repeated(x, w):
    # the same products and activations twice, as a model that recomputes a projection has
    a = torch.nn.functional.gelu(x @ w) + torch.nn.functional.gelu(x @ w)
    return a * (x @ w).sigmoid() + torch.add(x, 1) + torch.add(x, 1.0)


def random_twice(x):
    # two dropouts of the same input are different masks: never one
    return torch.nn.functional.dropout(x, 0.5) + torch.nn.functional.dropout(x, 0.5)


def written_between() -> torch.fx.GraphModule:
    """`x * 2` read before and after an in-place write of `x`, then once more: the first two are
    two values, the last is the second (a functional joint graph writes only at its end, so this
    one is built by hand)."""
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    mul = torch.ops.aten.mul.Tensor
    before = graph.call_function(mul, (x, 2))
    graph.call_function(torch.ops.aten.copy_.default, (x, y))
    after, again = graph.call_function(mul, (x, 2)), graph.call_function(mul, (x, 2))
    graph.output((before, after, again))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def encoder_layer():
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)


CASES = {
    "repeated": lambda: joint_graph(repeated, torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)),
    "random": lambda: joint_graph(random_twice, torch.randn(16, requires_grad=True)),
    "mutation": written_between,
    "encoder_layer": lambda: joint_graph(encoder_layer(), torch.randn(2, 5, 32, requires_grad=True), module=True),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_graph_as_torchs_cse(case):
    from torch._functorch.compile_utils import fx_graph_cse

    joint = CASES[case]()
    ours, theirs = joint_graph_cse(joint.graph), fx_graph_cse(joint.graph)
    assert str(ours) == str(theirs)
    if case == "repeated":
        assert len(ours.nodes) < len(joint.graph.nodes) - 4  # it merges, not only copies


def test_merged_graph_computes_the_same():
    torch.manual_seed(0)
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    joint = CASES["repeated"]()
    merged = torch.fx.GraphModule(joint, joint_graph_cse(joint.graph))  # flat inputs, as torch's
    primals, tangents = [x.detach(), w.detach()], [torch.ones(4, 8)]
    flat = lambda out: torch.utils._pytree.tree_leaves(out)  # noqa: E731
    torch.testing.assert_close(flat(merged(*primals, *tangents)), flat(joint(primals, tangents)))


def test_random_ops_and_values_around_a_mutation_are_kept():
    targets = lambda g: [n.target for n in g.nodes if n.op == "call_function"]  # noqa: E731
    dropouts = [t for t in targets(joint_graph_cse(CASES["random"]().graph))
                if "bernoulli" in str(t) or "rand" in str(t) or "dropout" in str(t)]
    assert len(dropouts) >= 2
    merged = joint_graph_cse(written_between().graph)
    assert targets(merged).count(torch.ops.aten.mul.Tensor) == 2
    x = torch.ones(3)
    torch.testing.assert_close(torch.fx.GraphModule(torch.nn.Module(), merged)(x, torch.full((3,), 5.0)),
                               (torch.full((3,), 2.0), torch.full((3,), 10.0), torch.full((3,), 10.0)))


def two_noises(x):
    # two draws of the same shape from the same kind of call: eager draws twice
    return x * torch.empty_like(x).exponential_() + x * torch.empty_like(x).exponential_()


def test_two_alike_draws_stay_two():
    """torch's CSE lists some random ops, not `exponential`: it would merge these two draws into
    one. Every op tagged `nondeterministic_seeded` is kept apart here."""
    joint = joint_graph(two_noises, torch.randn(16, requires_grad=True))
    draws = [n for n in joint_graph_cse(joint.graph).nodes if n.target == torch.ops.aten.exponential.default]
    assert len(draws) == 2

"""Random ops (rand/randn/_like, dropout, bernoulli) compile to Triton Philox: reproducible
under torch.manual_seed, fresh on every call, identical under every fusion policy."""

import warnings

import pytest
import torch

import pipec
from pipec.errors import PipecFallbackWarning

POLICIES = ("none", "default", "aggressive")


def draws(x):
    return torch.rand_like(x), torch.randn(48, 65, device=x.device)


def run(fn, x, seed=0, **options):
    torch.manual_seed(seed)
    return pipec.compile(fn, **options)(x)


def test_same_seed_same_values_and_calls_differ():
    x = torch.zeros(40, 50)
    c = pipec.compile(draws)
    torch.manual_seed(0)
    a = c(x)
    b = c(x)
    torch.manual_seed(0)
    again = c(x)
    for u, v, w in zip(a, b, again):
        assert torch.equal(u, w)
        assert not torch.equal(u, v)
    assert not torch.equal(a[0].flatten()[:100], a[1].flatten()[:100])


def test_distributions():
    u, n = run(draws, torch.zeros(40, 50))
    assert u.dtype == torch.float32 and u.shape == (40, 50) and n.shape == (48, 65)
    assert 0.0 <= u.min().item() and u.max().item() < 1.0
    assert abs(u.mean().item() - 0.5) < 0.02
    assert abs(n.mean().item()) < 0.05 and abs(n.std().item() - 1.0) < 0.05
    assert len(torch.unique(u)) > 1900  # no repeated stream inside one tensor


def test_fusion_policies_agree():
    def fn(x):
        return torch.rand_like(x) * x + torch.randn_like(x), (torch.randn_like(x) + x).sum(dim=1)

    x = torch.randn(12, 37)
    results = [run(fn, x, fusion=p) for p in POLICIES]
    for other in results[1:]:
        for a, b in zip(results[0], other):
            torch.testing.assert_close(a, b)


def test_graph_has_no_random_fallback():
    report = pipec.explain(draws, torch.zeros(4, 5))
    # only the seed draw (aten.randint.low, an intended "library" extern) runs through torch
    assert report.extern_ops == {"aten.randint.low": "library"}, report.extern_ops


@pytest.mark.parametrize("p", [0.5, 0.2])
def test_dropout_training(p):
    model = torch.nn.Sequential(torch.nn.Dropout(p)).train()
    compiled = pipec.compile(model)
    x = (torch.rand(64, 64) + 0.5).requires_grad_()  # no zeros of its own
    torch.manual_seed(3)
    y = compiled(x)
    y.sum().backward()
    dropped = y == 0
    assert abs(dropped.float().mean().item() - p) < 0.03
    torch.testing.assert_close(y[~dropped], x.detach()[~dropped] / (1 - p))
    grad = x.grad
    assert torch.equal(grad == 0, dropped)
    torch.testing.assert_close(grad[~dropped], torch.full_like(grad[~dropped], 1 / (1 - p)))
    torch.manual_seed(3)
    torch.testing.assert_close(compiled(x), y)


def test_dynamic_shapes():
    """Positions of a symbolic shape use its run-time strides: every size gets its own values."""
    compiled = pipec.compile(lambda x: torch.nn.functional.dropout(x, 0.5), dynamic=True)
    for rows in (6, 9, 13):
        x = torch.ones(rows, 30)
        torch.manual_seed(1)
        a = compiled(x)
        torch.manual_seed(1)
        torch.testing.assert_close(compiled(x), a)
        assert set(torch.unique(a).tolist()) == {0.0, 2.0}
        assert abs((a == 0).float().mean().item() - 0.5) < 0.15


def test_dropout_eval_is_identity():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).eval()
    x = torch.randn(4, 8)
    torch.testing.assert_close(pipec.compile(model)(x), model(x))


def test_bernoulli():
    def fn(x):
        return torch.bernoulli(x), torch.nn.functional.dropout(x, 0.25)

    x = torch.full((50, 40), 0.3)
    b, d = run(fn, x)
    assert set(torch.unique(b).tolist()) <= {0.0, 1.0}
    assert abs(b.mean().item() - 0.3) < 0.03
    assert abs((d == 0).float().mean().item() - 0.25) < 0.03


def test_reference_interpreter_matches_kernels():
    """pipec_capture.philox (the reference interpreter's rand) gives the kernels' numbers."""
    from torch.fx.experimental.proxy_tensor import make_fx

    import pipec_ir
    from pipec import plugins
    from pipec_capture import core_decompositions, lower_graph
    from pipec_capture.reference import run_graph

    def fn(x):
        return torch.rand_like(x) + x, torch.randn_like(x) * 2

    x = torch.randn(9, 70)
    graph = lower_graph(make_fx(fn, decomposition_table=core_decompositions())(x), name="rand")
    registry = plugins.get_registry()
    options = pipec_ir.CompileOptions()
    plan = registry.get("fusion", "default").fuse(graph, options)
    run_kernels = registry.get("runtime", "launch").load(registry.get("codegen", "triton").generate(plan, options),
                                                         options)
    torch.manual_seed(5)
    ref = run_graph(graph, [x])
    torch.manual_seed(5)
    got = run_kernels([x])
    for r, g in zip(ref, got):
        torch.testing.assert_close(g, r)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA Graph replays need the GPU machine")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_gpu_reproducible_and_fresh(mode):
    """On the GPU, eager launches and CUDA Graph replays both draw a fresh seed per call, and the
    same generator state gives the same draws (the warm-up and capture calls of reduce-overhead
    draw their own seeds, so the seeded calls start after them)."""
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)).cuda().train()
    compiled = pipec.compile(model, mode=mode)
    x = torch.randn(128, 64, device="cuda")
    for _ in range(3):  # compile, warm up and capture first: seeded calls below are all replays
        compiled(x)
    torch.manual_seed(7)
    outs = [compiled(x).clone() for _ in range(4)]
    torch.manual_seed(7)
    again = [compiled(x).clone() for _ in range(4)]
    for a, b in zip(outs, again):
        torch.testing.assert_close(a, b)
    assert not torch.equal(outs[2], outs[3])
    dropped = (outs[3] == 0).float().mean().item()
    assert abs(dropped - 0.5) < 0.03
    u = pipec.compile(lambda t: torch.rand_like(t), mode=mode)(x)
    assert 0.0 <= u.min().item() and u.max().item() < 1.0 and abs(u.mean().item() - 0.5) < 0.02


class NoisyBlock(torch.nn.Module):
    """Dropout, a Bernoulli mask, rand_like and an op pipec never lowers (exponential_), in
    training: every kind of draw, in one step."""

    def __init__(self):
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        h = torch.nn.functional.dropout(torch.relu(self.up(x)), 0.3, training=True)
        h = h * torch.bernoulli(torch.full_like(h, 0.8)) + torch.rand_like(h)
        h = h * torch.empty_like(h).exponential_()
        return self.down(h)


def test_fallback_random_gives_eagers_values_draw_for_draw():
    """`fallback_random=True` leaves every random op to torch's generator (lower_random.FALLBACK_RANDOM),
    so a training step with dropout equals eager's exactly, gradients too, with no fallback warning;
    without it, pipec's own Philox streams differ from eager's. A cache entry of one is never
    served to the other."""
    torch.manual_seed(0)
    model, x = NoisyBlock(), torch.randn(8, 16)

    def step(fn):
        model.zero_grad()
        torch.manual_seed(1)
        out = fn(x)
        out.square().mean().backward()
        return out.detach(), [p.grad.clone() for p in model.parameters()]

    eager = step(model)
    philox = step(pipec.compile(model))
    assert not torch.equal(philox[0], eager[0])
    torch._dynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)
        compiled = pipec.compile(model, fallback_random=True)
        same = step(compiled)
    torch.testing.assert_close(same[0], eager[0], rtol=0, atol=1e-6)
    for got, want in zip(same[1], eager[1]):
        torch.testing.assert_close(got, want)
    reasons = {t: r for g in compiled.pipec_session.graphs for t, r in g.extern_ops}
    assert reasons["aten.native_dropout.default"] == "fallback_random"
    assert not any(n.op == "rand" for g in compiled.pipec_session.graphs for n in g.plan.graph.nodes)


def gate_noise(scores):
    """Router noise as PhiMoE's sparsemixer draws it: exponential noise that reads only its shape,
    a uniform draw shaped like a row reduction, then exponential noise again. Fusion must not run
    the third draw before the second (it reads nothing the second waits for)."""
    noisy = scores - torch.empty_like(scores).exponential_().log()
    top, index = noisy.max(dim=-1, keepdim=True)
    coin = torch.rand_like(top).uniform_() > 0.5
    again = scores - torch.empty_like(scores).exponential_().log()
    return torch.where(coin, top, again.amax(dim=-1, keepdim=True)) * scores.softmax(-1).gather(-1, index)


@pytest.mark.parametrize("fusion", POLICIES)
def test_draws_from_torchs_generator_keep_their_order(fusion):
    scores = torch.randn(64, 8)
    torch.manual_seed(5)
    expected = gate_noise(scores)
    compiled = pipec.compile(gate_noise, fallback_random=True, fusion=fusion)
    torch.manual_seed(5)
    torch.testing.assert_close(compiled(scores), expected, rtol=0, atol=1e-6)
    plan = compiled.pipec_session.graphs[0].plan
    seeded = [n.attr("target") for n in plan.graph.nodes if n.op == "extern" and n.attr("seeded")]
    assert seeded == ["aten.exponential.default", "aten.rand_like.default", "aten.uniform.default",
                      "aten.exponential.default"]
    position = {n: i for i, k in enumerate(plan.kernels) for n in k.nodes}
    draws = [position[n.name] for n in plan.graph.nodes if n.op == "extern" and n.attr("seeded")]
    assert draws == sorted(draws)

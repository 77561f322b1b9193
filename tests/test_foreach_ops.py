"""`_foreach_*` ops and compiled optimizer steps: every foreach op is lowered one tensor at a
time (capture `foreach.py`), with no extern call, and a compiled step (foreach or one tensor at a
time) updates parameters and state as the uncompiled step and Dynamo's graph run eagerly do."""

import copy
import warnings

import pytest
import torch

import pipec
from pipec.errors import PipecFallbackWarning


def every_kind(xs, ys, zs, t):
    """One call of each overload kind: lists, a scalar, a scalar list, a tensor, alpha, unary,
    a scalar base, the addc* family with a list of scalars, reductions. (Their `Tensor` overload
    of scalars fails in Dynamo's fake tensors, so none reaches a backend.)"""
    a = torch._foreach_add(xs, ys, alpha=0.5)
    a = torch._foreach_mul(a, 1.5)
    a = torch._foreach_sub(a, [0.1, 0.2, 0.3])
    a = torch._foreach_div(a, t)
    b = torch._foreach_addcmul(xs, ys, zs, value=0.3)
    c = torch._foreach_addcdiv(xs, ys, torch._foreach_add(torch._foreach_abs(zs), 1.0),
                               [0.5, -1.0, 2.0])
    d = torch._foreach_lerp(xs, ys, 0.25)
    e = torch._foreach_pow(2.0, torch._foreach_tanh(zs))
    f = torch._foreach_maximum(torch._foreach_sqrt(torch._foreach_abs(xs)), 0.7)
    g = torch._foreach_clamp_max(ys, [0.1, 0.2, 0.3])
    n = torch._foreach_norm(xs)
    m = torch._foreach_max(ys)
    return [*a, *b, *c, *d, *e, *f, *g, *n, *m]


def inputs(seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(5, 7), (13,), (3, 4, 2)]
    return tuple([torch.randn(s, generator=gen) for s in shapes] for _ in range(3)) + (torch.tensor(1.7),)


def test_every_overload_kind_matches_eager_with_no_extern():
    args = inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)
        got = pipec.compile(every_kind)(*args)
    want = every_kind(*args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    report = pipec.explain(every_kind, *args)
    assert not any(op.startswith("aten._foreach") for op in report.extern_ops), report.extern_ops


def test_in_place_foreach_writes_its_inputs():
    def step(params, grads):
        torch._foreach_mul_(params, 0.9)
        torch._foreach_add_(params, grads, alpha=-0.1)

    params, grads, _, _ = inputs(1)
    mine = [p.clone() for p in params]
    step(params, grads)
    pipec.compile(step)(mine, grads)
    for p, q in zip(mine, params):
        torch.testing.assert_close(p, q)


OPTIMIZERS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=True),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, amsgrad=True, foreach=True),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, foreach=True),
    "rmsprop": lambda ps: torch.optim.RMSprop(ps, lr=1e-3, momentum=0.5, foreach=True),
    # one tensor at a time: Dynamo makes its addcmul_ with a value the prim `fma` (lower_pointwise.py)
    "adamw_single_tensor": lambda ps: torch.optim.AdamW(ps, lr=1e-2, foreach=False),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_compiled_optimizer_step(name):
    """Three steps of a compiled `opt.step`, every copy given the same gradients each step (so
    only the step's arithmetic differs), against Dynamo's own graph of the step run eagerly and
    the uncompiled step: parameters and optimizer state."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    copies = [copy.deepcopy(model) for _ in range(3)]
    opts = [OPTIMIZERS[name](m.parameters()) for m in copies]
    steps = [pipec.compile(opts[0].step), torch.compile(opts[1].step, backend="eager"), opts[2].step]
    gen = torch.Generator().manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)
        for _ in range(3):
            grads = [torch.randn(p.shape, generator=gen) for p in model.parameters()]
            for m, step in zip(copies, steps):
                for p, g in zip(m.parameters(), grads):
                    p.grad = g.clone()
                step()
    for other in copies[1:]:
        for p, q in zip(copies[0].parameters(), other.parameters()):
            torch.testing.assert_close(p, q)
    for other in opts[1:]:
        for state, reference in zip(opts[0].state.values(), other.state.values()):
            for key, value in state.items():
                torch.testing.assert_close(value, reference[key])


def test_default_policy_merges_the_step_counts():
    """AdamW's step counts (one 0-d state tensor per parameter, each incremented and stored) are
    independent 0-d kernels; `default` merges them, so the step is about one kernel per
    parameter (its update) rather than two (combo kernels off: with them the updates are fewer
    launches still, tests/test_combo_kernels.py)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(4)])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    params = len(list(model.parameters()))
    report = pipec.explain(opt.step, combo_kernels=False)
    assert params <= report.kernel_count <= params + 2, report.kernel_count


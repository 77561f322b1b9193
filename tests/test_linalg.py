"""Dense linear algebra (torch.linalg) in compiled graphs.

Solves and factorizations are library calls (reason "library": LAPACK on the CPU, cuBLAS /
cuSOLVER / MAGMA on CUDA, as Inductor calls them): no fallback warning, allowed under fullgraph,
and the Triton kernels around them stay generated. Those that check their input (torch.linalg.inv,
cholesky, solve: `_linalg_check_errors` under AOTAutograd's `with_effects`) compiled the whole
graph eagerly before; they now raise eager's error on a singular input. The triangular solve is
the chunked gated-delta rule of Qwen3-Next, Qwen3.5 and OLMo-hybrid.
"""

import warnings

import pytest
import torch

import pipec


def _spd(a):
    return a @ a.mT + torch.eye(a.shape[-1])


def _well_conditioned(a):
    return a + 4 * torch.eye(a.shape[-1], device=a.device)


CASES = {
    "solve_triangular": lambda a, b: torch.linalg.solve_triangular(a.tril(-1) * 0.1 + torch.eye(4), b, upper=False,
                                                                   unitriangular=True).relu(),
    "inv": lambda a, b: torch.linalg.inv(_well_conditioned(a)) @ b * 2,
    "solve": lambda a, b: torch.linalg.solve(_well_conditioned(a), b).sigmoid(),
    "cholesky": lambda a, b: torch.linalg.cholesky(_spd(a)).exp(),
    "cholesky_solve": lambda a, b: torch.cholesky_solve(b, torch.linalg.cholesky(_spd(a))) + 1,
    "lu_factor": lambda a, b: torch.linalg.lu_factor(_well_conditioned(a))[0] * 3,
    "qr": lambda a, b: torch.linalg.qr(a)[1].abs() + 1,
    "eigvalsh": lambda a, b: torch.linalg.eigvalsh(_spd(a)).sqrt(),
    "svdvals": lambda a, b: torch.linalg.svdvals(a) * 2,
    "slogdet": lambda a, b: torch.linalg.slogdet(_well_conditioned(a))[1] + b.sum((-2, -1)),
    "pinv": lambda a, b: torch.linalg.pinv(_well_conditioned(a)) @ b,
}


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 3, 4, 4, generator=g), torch.randn(2, 3, 4, 2, generator=g)


@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_compiles_whole_with_library_calls(name):
    fn = CASES[name]
    a, b = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        got = pipec.compile(fn, fullgraph=True)(a, b)
        report = pipec.explain(fn, a, b)
    torch.testing.assert_close(got, fn(a, b), atol=1e-5, rtol=1e-4)
    assert report.graph_count == 1 and report.extern_ops
    assert set(report.extern_ops.values()) == {"library"}, report.extern_ops
    # the pointwise work around the call is still a generated kernel
    assert any(k["runs_as"] == "Triton" for g in report.graphs for k in g["kernels"])


def gated_delta_chunk(k, v, beta):
    """The triangular system of transformers' `torch_chunk_gated_delta_rule` (Qwen3-Next)."""
    size = k.shape[-2]
    upper = torch.triu(torch.ones(size, size, dtype=torch.bool), diagonal=0)
    attn = -((k * beta) @ k.mT).masked_fill(upper, 0)
    system = torch.eye(size) - attn * 0.1
    return torch.linalg.solve_triangular(system, v * beta, upper=False, unitriangular=True)


@pytest.mark.parametrize("fn", [gated_delta_chunk,
                                lambda k, v, beta: torch.linalg.inv(_well_conditioned(k @ k.mT)) @ v * beta,
                                lambda k, v, beta: torch.linalg.cholesky(_spd(k)) @ v + beta],
                         ids=["solve_triangular", "inv", "cholesky"])
def test_linalg_training_gradients_match_eager(fn):
    g = torch.Generator().manual_seed(1)
    leaves = [torch.randn(2, 2, 8, 8, generator=g), torch.randn(2, 2, 8, 4, generator=g),
              torch.rand(2, 2, 8, 1, generator=g)]
    eager = [t.clone().requires_grad_() for t in leaves]
    mine = [t.clone().requires_grad_() for t in leaves]
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        out = pipec.compile(fn)(*mine)
    ref = fn(*eager)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)
    weights = torch.randn(ref.shape, generator=g)
    (out * weights).sum().backward()
    (ref * weights).sum().backward()
    for m, e in zip(mine, eager):
        torch.testing.assert_close(m.grad, e.grad, atol=1e-4, rtol=1e-4)


def test_singular_matrix_raises_eagers_error():
    singular = torch.zeros(2, 3, 3)
    with pytest.raises(torch.linalg.LinAlgError, match="singular") as eager:
        torch.linalg.inv(singular)
    with pytest.raises(torch.linalg.LinAlgError, match="singular") as compiled:
        pipec.compile(lambda x: torch.linalg.inv(x) + 1, fullgraph=True)(singular)
    assert str(compiled.value) == str(eager.value)


@pytest.fixture()
def check_not_an_effect():
    """torch before 2.12 (the GPU machine's 2.11): `_linalg_check_errors` is no effect, so
    tracing would drop it; simulated here by clearing its registration, restored after."""
    from torch._higher_order_ops import effects

    op = torch.ops.aten._linalg_check_errors.default
    before = effects._get_effect(op)
    holder = torch._library.simple_registry.singleton.find(effects._get_op_qualname(op)).effect
    holder._set_default_effect()
    assert effects._get_effect(op) is None
    yield
    holder._set_default_effect()
    if before is not None:
        effects._register_effectful_op(op, before)
    assert effects._get_effect(op) == before


def test_singular_matrix_raises_where_torch_does_not_count_the_check_as_an_effect(check_not_an_effect, tmp_path):
    """pipec registers the check as an effect while AOTAutograd traces (aot.linalg_checks_kept):
    the compiled inverse of a singular matrix raises eager's error where it returned infinities.
    torch.export keeps the check without it."""
    singular = torch.zeros(2, 3, 3)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        pipec.compile(lambda x: torch.linalg.inv(x) + 1, fullgraph=True)(singular)
    pipec.export(_Inverse(), (torch.eye(3).expand(2, 3, 3).contiguous(),), tmp_path / "inv.pipec")
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        pipec.load(tmp_path / "inv.pipec")(singular)
    from torch._higher_order_ops import effects

    assert effects._get_effect(torch.ops.aten._linalg_check_errors.default) is None  # as it was


class _Inverse(torch.nn.Module):
    def forward(self, a):
        return torch.linalg.inv(a) * 2


class _Solver(torch.nn.Module):
    def forward(self, a, b):
        return CASES["inv"](a, b) + CASES["solve_triangular"](a, b)


def test_exported_artifact_with_checked_factorization(tmp_path):
    """torch.export hands the effect token over as an input and an output (InputKind.TOKEN):
    the artifact makes it inside instead and takes the user's inputs alone."""
    a, b = _inputs()
    path = tmp_path / "solver.pipec"
    pipec.export(_Solver(), (a, b), path, check=True)
    torch.testing.assert_close(pipec.load(path)(a, b), _Solver()(a, b), atol=1e-5, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA Graphs need the GPU machine")
def test_reduce_overhead_leaves_a_checked_factorization_to_launches():
    """`_linalg_check_errors` reads `info` on the host, which a CUDA Graph capture cannot: the
    program runs as launch, with the one warning naming why, and eager's result."""
    a, b = (t.cuda() for t in _inputs())
    fn = CASES["inv"]
    with pytest.warns(RuntimeWarning, match="synchronizes with the host"):
        got = pipec.compile(fn, mode="reduce-overhead")(a, b)
    torch.testing.assert_close(got, fn(a, b), atol=1e-5, rtol=1e-4)

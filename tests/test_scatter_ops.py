"""The scatter family as generated Triton (docs/IR.md, `scatter`) through pipec.compile.

scatter / scatter_add / scatter_reduce / index_put / embedding_dense_backward lower to an
init launch plus a scatter launch (tl.store, or atomics where positions repeat). Every case
is checked against eager with assert_close and must run without extern fallbacks.
Accumulating cases use duplicate positions on purpose; plain writes use unique positions
(eager's order for duplicates is unspecified there).
"""

import copy

import pytest
import torch
from torch import nn

import pipec

g = torch.Generator().manual_seed(7)
X = torch.randn(5, 6, generator=g)
SRC = torch.randn(4, 6, generator=g)
DUP = torch.randint(0, 5, (4, 6), generator=g)  # many repeated rows per column
UNIQUE = torch.stack([torch.randperm(5, generator=g)[:4] for _ in range(6)], 1)  # distinct per column
COLS = torch.randint(0, 6, (5, 3), generator=g)  # along the last dim, with repeats
WIDE = torch.randn(5, 4, generator=g)
ROWS = torch.tensor([0, 3, 0, -1, 3])  # duplicates and a negative index


def _check(fn, *inputs, **tol):
    compiled = pipec.compile(fn)
    expected = fn(*inputs)
    torch.testing.assert_close(compiled(*inputs), expected, **tol)
    report = pipec.explain(fn, *inputs)
    assert report.extern_ops == {}, report.extern_ops
    return report


CASES = {
    "scatter_src": (lambda x, s, i: torch.scatter(x, 0, i, s * 2), X, SRC, UNIQUE),
    "scatter_value_neg_dim": (lambda x, i: torch.scatter(x, -2, i, -1.5), X, UNIQUE),
    "scatter_add_dup": (lambda x, s, i: torch.scatter_add(x, 0, i, s), X, SRC, DUP),
    "scatter_add_neg_dim": (lambda x, s, i: torch.scatter_add(x + 1, -1, i, s), X, WIDE, COLS),
    "scatter_add_src_larger": (lambda x, s, i: torch.scatter_add(x, 0, i[:3, :4], s), X, SRC, DUP),
    "reduce_sum_exclude_self": (lambda x, s, i: x.scatter_reduce(0, i, s, "sum", include_self=False), X, SRC, DUP),
    "reduce_amax": (lambda x, s, i: x.scatter_reduce(0, i, s, "amax"), X, SRC, DUP),
    "reduce_amin_exclude_self": (lambda x, s, i: x.scatter_reduce(0, i, -s, "amin", include_self=False),
                                 X, SRC, DUP),
    "reduce_mean": (lambda x, s, i: x.scatter_reduce(0, i, s, "mean"), X, SRC, DUP),
    "reduce_mean_exclude_self": (lambda x, s, i: x.scatter_reduce(0, i, s, "mean", include_self=False),
                                 X, SRC, DUP),
    "index_put_accumulate_dup": (lambda x, s, r: x.index_put((r,), s[0], accumulate=True), X, SRC, ROWS),
    "index_put_broadcast_scalar": (lambda x, s, r: x.index_put((r[:2], r[1:3].abs()), s[0, 0], accumulate=True),
                                   X, SRC, ROWS),
    "index_put_unique": (lambda x, s, r: x.index_put((r[1:4],), s[:3]), X, SRC, ROWS),
    "index_put_second_dim": (lambda x, s, r: torch.ops.aten.index_put(x, [None, r.abs()], s[0, :5].unsqueeze(1),
                                                                      True), X, SRC, ROWS),
    # masked_scatter: a running count of the mask picks source elements in order
    "masked_scatter": (lambda x, s: x.masked_scatter(x.flip(0) > 0, s * 2), X, WIDE.repeat(2, 2)),
    "masked_scatter_broadcast_mask": (lambda x, m, s: torch.masked_scatter(x, m[0] > 0, s), X, SRC, WIDE.repeat(2, 2)),
    "masked_scatter_broadcast_self": (lambda x, m, s: torch.masked_scatter(x[0], m > 0.5, s), X, SRC, WIDE.repeat(2, 2)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_scatter_family_matches_eager(name):
    fn, *inputs = CASES[name]
    _check(fn, *inputs)


def test_integer_scatter_add():
    x = torch.randint(-9, 9, (5, 6), generator=g)
    _check(lambda x, s, i: torch.scatter_add(x, 0, i, s), x, torch.randint(-9, 9, (4, 6), generator=g), DUP)


def test_half_scatter_add_accumulates_in_float32():
    # duplicates accumulate in float32 and round once; eager (CPU) rounds each add
    _check(lambda x, s, i: torch.scatter_add(x, 0, i, s), X.half(), SRC.half(), DUP, rtol=2e-3, atol=2e-3)


def test_half_amax_is_exact():
    _check(lambda x, s, i: x.scatter_reduce(0, i, s, "amax"), X.bfloat16(), SRC.bfloat16(), DUP)


def test_producers_fuse_into_the_scatter_kernel():
    """The zeros and the src arithmetic run inside the scatter kernel: its two Triton kernels
    (init, scatter) are all the graph has."""
    report = _check(lambda s, i: torch.zeros(5, 6).scatter_add(0, i, s.exp() * 2), SRC, DUP)
    assert report.kernel_count == 2


def test_reader_of_a_scatter_starts_a_new_kernel():
    report = _check(lambda x, s, i: torch.scatter_add(x, 0, i, s).relu() + 1, X, SRC, DUP)
    assert report.kernel_count == 3  # init, scatter, then relu + 1
    assert any("readers start a new kernel" in reason for *_, reason in report.not_fused), report.not_fused


# ------------------------------------------------------------------ mutation (functionalized)

def _run_on_copies(fn, *inputs):
    """Eager and pipec on clones of the same inputs: outputs and mutated inputs match."""
    eager_in = [t.clone() for t in inputs]
    pipec_in = [t.clone() for t in inputs]
    expected = fn(*eager_in)
    actual = pipec.compile(fn)(*pipec_in)
    torch.testing.assert_close(actual, expected)
    torch.testing.assert_close(pipec_in, eager_in, msg=lambda m: f"inputs after the call differ: {m}")


def test_index_put_accumulate_in_place_on_input():
    def f(x, rows, v):
        x.index_put_((rows,), v, accumulate=True)
        return x * 2

    _run_on_copies(f, X, ROWS, SRC[0])


def test_scatter_in_place_on_input():
    def f(x, i, s):
        x.scatter_(1, i, s)
        return x.sum()

    _run_on_copies(f, X, torch.stack([torch.randperm(6, generator=g)[:3] for _ in range(5)]), WIDE)


def test_indexed_add_assign_on_input():
    def f(x, rows):
        x[rows] += 1.0
        return x

    _run_on_copies(f, X, torch.tensor([4, 1, 2]))



def test_index_copy_into_a_cache_at_dynamic_lengths():
    """A static KV cache written with `index_copy_` at the new tokens' positions, compiled with
    symbolic sizes (as a decode loop's lengths are): the write is lowered, not an extern."""
    def f(cache, key, start):
        pos = torch.arange(key.shape[2]) + start
        cache.index_copy_(2, pos, key)
        return cache * 2

    compiled = pipec.compile(f, dynamic=True, fullgraph=True)
    for length, start in ((3, 0), (5, 4), (2, 1)):
        cache = torch.zeros(2, 3, 12, 4)
        key = torch.randn(2, 3, length, 4, generator=g)
        expected_cache = cache.clone()
        expected = f(expected_cache, key, start)
        torch.testing.assert_close(compiled(cache, key, start), expected)
        torch.testing.assert_close(cache, expected_cache)

# ------------------------------------------------------------------ embedding backward, training

class _Bag(nn.Module):
    def __init__(self, scale_grad_by_freq=False):
        super().__init__()
        self.emb = nn.Embedding(11, 4, padding_idx=2, scale_grad_by_freq=scale_grad_by_freq)
        self.out = nn.Linear(4, 3)

    def forward(self, tokens):
        return self.out(torch.tanh(self.emb(tokens))).mean(1)


@pytest.mark.parametrize("scale_grad_by_freq", [False, True], ids=["plain", "scale_by_freq"])
def test_embedding_with_padding_idx_trains_like_eager(scale_grad_by_freq):
    torch.manual_seed(0)
    eager = _Bag(scale_grad_by_freq)
    model = copy.deepcopy(eager)
    compiled = pipec.compile(model)
    gen = torch.Generator().manual_seed(5)
    batches = [(torch.randint(0, 11, (3, 7), generator=gen), torch.randn(3, 3, generator=gen)) for _ in range(4)]
    batches[0][0][0, :3] = 2  # the padding row is looked up, and must get no gradient

    def train(m, call):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        grads = []
        for tokens, target in batches:
            loss = ((call(tokens) - target) ** 2).mean()
            loss.backward()
            grads.append(m.emb.weight.grad.clone())
            opt.step()
            opt.zero_grad(set_to_none=True)
        return grads

    expected, actual = train(eager, eager), train(model, compiled)
    # atomics add duplicate tokens' rows in another order than eager
    torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
    assert torch.all(actual[0][2] == 0)
    torch.testing.assert_close(model.state_dict(), eager.state_dict(), rtol=1e-5, atol=1e-6)
    backward = [g for g in compiled.pipec_session.graphs if g.kind == "backward"]
    assert backward and all("aten.embedding_dense_backward.default" not in g.extern_ops for g in backward)


# ------------------------------------------------------------------ GPU: real atomics

@pytest.mark.skipif(not torch.cuda.is_available(), reason="atomics on the device need CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.int64, torch.bfloat16])
def test_gpu_atomics_with_heavy_contention(dtype):
    gen = torch.Generator(device="cuda").manual_seed(0)
    n, rows = 1 << 16, 7  # 65536 values into 7 rows: every position is hit thousands of times
    floating = dtype.is_floating_point
    src = (torch.randn(n, 8, generator=gen, device="cuda") if floating
           else torch.randint(-50, 50, (n, 8), generator=gen, device="cuda")).to(dtype)
    idx = torch.randint(0, rows, (n, 8), generator=gen, device="cuda")
    x = torch.zeros(rows, 8, device="cuda", dtype=dtype) - (3 if floating else 0)  # negative floats for amax

    def f(x, i, s):
        return (torch.scatter_add(x, 0, i, s), x.scatter_reduce(0, i, s, "amax"),
                x.scatter_reduce(0, i, -s, "amin", include_self=False))

    # the reference accumulates in float64 (eager bfloat16 would round at each of ~9000 adds)
    wide = torch.float64 if floating else dtype
    expected = [t.to(dtype) for t in f(x.to(wide), idx, src.to(wide))]
    tol = {"rtol": 1e-2, "atol": 0.5} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-2}
    torch.testing.assert_close(pipec.compile(f)(x, idx, src), expected, **tol)

"""Mutation and aliasing under pipec.compile behave exactly as in eager.

AOTAutograd functionalizes every graph: an input mutated in forward comes back as an
extra graph output that its runtime wrapper copies into the input, and an output that
aliases an input (or another output) is regenerated as a view. These tests check that
pipec's backend and runtime honor those conventions: inputs, returned views, module
buffers (BatchNorm running stats) and gradients all match eager.
"""

import copy

import pytest
import torch
from torch import nn

import pipec


def _run_both(fn, *make_inputs, calls: int = 2):
    """Calls eager `fn` and pipec's on identical fresh inputs `calls` times; checks outputs and inputs."""
    compiled = pipec.compile(fn)
    for _ in range(calls):
        eager_in = [make() for make in make_inputs]
        pipec_in = [t.clone() for t in eager_in]
        expected = fn(*eager_in)
        actual = compiled(*pipec_in)
        torch.testing.assert_close(actual, expected)
        torch.testing.assert_close(pipec_in, eager_in, msg=lambda m: f"inputs after the call differ: {m}")
    return pipec_in, actual


def _randn(*shape):
    return lambda: torch.randn(*shape)


def test_in_place_add_on_input():
    def f(x):
        x.add_(1)
        return x * 2

    _run_both(f, _randn(4, 5))


def test_input_mutated_and_returned_is_the_input():
    def f(x):
        return x.mul_(3)

    (x,), out = _run_both(f, _randn(4, 5))
    assert out.data_ptr() == x.data_ptr()


def test_copy_into_input():
    def f(dst, src):
        dst.copy_(src * 2)
        return src + 1

    _run_both(f, _randn(3, 7), _randn(3, 7))


def test_in_place_on_a_view_of_the_input():
    def f(x):
        x[1:, ::2].mul_(3)  # strided view: only part of the input changes
        return x.sum(dim=0)

    _run_both(f, _randn(4, 5))


def test_returned_views_alias_the_input_as_in_eager():
    def f(x):
        return x.view(-1), x.t(), x[:, 1:3], x + 1

    (x,), (flat, t, part, _) = _run_both(f, _randn(4, 5))
    for view in (flat, t, part):
        assert view._base is x
    part.zero_()  # writing through the returned view changes the input, as in eager
    assert x[:, 1:3].abs().sum() == 0


def test_outputs_aliasing_each_other():
    def f(x, w):
        y = x @ w
        return y, y.view(-1), y[0]

    _, (y, flat, row) = _run_both(f, _randn(4, 5), _randn(5, 3))
    y.add_(1)  # eager: the three outputs share storage; so must pipec's
    torch.testing.assert_close(flat, y.view(-1))
    torch.testing.assert_close(row, y[0])


def test_in_place_on_intermediate_keeps_gradients():
    def f(x, w):
        h = x @ w
        h.add_(1)
        h[:, 0].mul_(2)  # in place through a view of the intermediate
        return (h * h).sum()

    x = torch.randn(4, 5)
    w = torch.randn(5, 3, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    f(x, w).backward()
    pipec.compile(f)(x, w2).backward()
    torch.testing.assert_close(w2.grad, w.grad)


class RunningMean(nn.Module):
    """A linear layer that also tracks an exponential moving average of its input in a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 3)
        self.register_buffer("ema", torch.zeros(6))
        self.register_buffer("calls", torch.zeros((), dtype=torch.long))

    def forward(self, x):
        self.ema.mul_(0.9).add_(x.mean(dim=0), alpha=0.1)
        self.calls += 1
        return self.fc(x - self.ema)


@pytest.mark.parametrize("momentum", [0.1, None], ids=["ema", "cumulative"])
def test_batch_norm_running_stats_match_eager(momentum):
    torch.manual_seed(0)
    eager = nn.BatchNorm2d(3, momentum=momentum)
    model = copy.deepcopy(eager)
    compiled = pipec.compile(model)
    g = torch.Generator().manual_seed(1)
    for _ in range(3):
        x = torch.randn(4, 3, 5, 5, generator=g) * 2 + 1
        torch.testing.assert_close(compiled(x), eager(x))
    for name, buf in eager.named_buffers():
        torch.testing.assert_close(dict(model.named_buffers())[name], buf, msg=lambda m, n=name: f"{n}: {m}")
    assert int(model.num_batches_tracked) == 3
    eager.eval()
    model.eval()
    x = torch.randn(4, 3, 5, 5, generator=g)
    with torch.no_grad():  # inference now normalizes with the running stats that pipec updated
        torch.testing.assert_close(compiled(x), eager(x))


def test_batch_norm_statistics_recalibrated_under_no_grad():
    """Train-mode BatchNorm under no_grad (recalibrating the statistics after training): an
    inference graph whose running mean, variance and batch count are written in place."""
    torch.manual_seed(0)
    eager = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    model = copy.deepcopy(eager)
    compiled = pipec.compile(model)
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for _ in range(3):
            x = torch.randn(2, 3, 7, 7, generator=g)
            torch.testing.assert_close(compiled(x), eager(x))
    torch.testing.assert_close(dict(model.named_buffers()), dict(eager.named_buffers()))


def test_buffer_updated_in_forward_while_training():
    torch.manual_seed(0)
    eager = RunningMean()
    model = copy.deepcopy(eager)
    compiled = pipec.compile(model)
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(2)
    for _ in range(3):
        x = torch.randn(8, 6, generator=g)
        for m, opt in ((eager, opt_e), (compiled, opt_c)):
            m(x).square().mean().backward()
            opt.step()
            opt.zero_grad()
    torch.testing.assert_close(model.ema, eager.ema)
    assert int(model.calls) == int(eager.calls) == 3
    torch.testing.assert_close(model.fc.weight, eager.fc.weight)


def _key_built_in_place(q, kv, k_rot, cache):
    """DeepSeek-V3's multi-head latent attention builds its key in place (`new_empty`, then a
    `copy_` into each half) and attends with it; a KV cache buffer is written with `index_copy_`."""
    b, _, s, _ = kv.shape
    kv = kv.view(b, s, 4, 12).transpose(1, 2)
    k_nope, v = torch.split(kv, [4, 8], dim=-1)
    key = kv.new_empty(b, 4, s, 8)
    key[..., :4].copy_(k_nope)
    key[..., 4:].copy_(k_rot.expand(-1, 4, -1, -1))
    cache.index_copy_(2, torch.arange(s), key)
    return torch.nn.functional.scaled_dot_product_attention(q, key, v, scale=0.35)


@pytest.mark.parametrize("backend", ["pipec.compile", "torch.compile"])
def test_in_place_writes_beside_attention_are_kept(backend):
    """Attention's rewrite of the Dynamo graph dropped dead code with FX's own purity test, which
    does not know a Dynamo graph's in-place methods: the two `copy_`s went, and attention read an
    uninitialized key (DeepSeek-V3's logits off by 0.03; Llama-4 too). Every in-place write stays."""
    torch.manual_seed(0)
    args = (torch.randn(2, 4, 8, 8), torch.randn(2, 1, 8, 48), torch.randn(2, 1, 8, 4))
    compiled = (pipec.compile(_key_built_in_place) if backend == "pipec.compile"
                else torch.compile(_key_built_in_place, backend="pipec"))
    eager_cache, pipec_cache = torch.zeros(2, 4, 16, 8), torch.zeros(2, 4, 16, 8)
    expected = _key_built_in_place(*args, eager_cache)
    torch.testing.assert_close(compiled(*args, pipec_cache), expected)
    torch.testing.assert_close(pipec_cache, eager_cache)


def _mask_under_vmap(q, k, v):
    """transformers builds some attention masks under torch.vmap (Jamba): Dynamo records the
    vmap's nesting level as calls whose results nobody reads."""
    positions = torch.arange(q.shape[-2])
    mask = torch.vmap(lambda i: positions <= i)(positions)
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_mask_built_under_vmap_compiles():
    """Attention's rewrite dropped `_vmap_decrement_nesting` as dead code (and its evaluation of a
    constant mask could stop halfway into a vmap), which left functorch's level set: AOTAutograd
    then failed with "your tensor may have escaped from inside a function being vmapped"."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 2, 8, 4) for _ in range(3))
    compiled = torch.compile(_mask_under_vmap, backend="pipec")
    torch.testing.assert_close(compiled(q, k, v), _mask_under_vmap(q, k, v))


# ------------------------------------------------------------------ writes to inputs (IR 1.7)

def _program_text(tmp_path) -> str:
    (path,) = tmp_path.glob("*.codegen.txt")
    return path.read_text()


def test_an_update_in_place_is_stored_by_its_kernel(tmp_path):
    """An inference graph's input mutation stays in the graph (Graph.writes): the kernel computing
    the new value stores it into the input (its `inplace` names the input), as an optimizer's
    update does, instead of a new tensor that AOTAutograd copies back."""
    def f(x, y):
        x.mul_(0.9).add_(y)
        return y.sum()

    compiled = pipec.compile(f, dump_dir=str(tmp_path))
    x, y = torch.randn(6, 5), torch.randn(6, 5)
    expected_x = x.clone()
    expected = f(expected_x, y)
    torch.testing.assert_close(compiled(x, y), expected)
    torch.testing.assert_close(x, expected_x)
    text = _program_text(tmp_path)
    assert "<-" in text and "inplace=" in text, text


@pytest.mark.parametrize("case", ["transposed input", "read after the update", "from a reduction", "cast",
                                  "two inputs"])
def test_writes_that_cannot_be_stored_in_place_are_copied(case):
    """Where the kernel cannot store the value into the input (the caller's tensor is not
    contiguous, the old values are read later, a reduction makes the value, a dtype cast), the
    runtime copies it there after the run: inputs and outputs are eager's."""
    if case == "transposed input":
        def f(x):
            x.add_(1.0)
            return x.sum(0)
        make = [lambda: torch.randn(5, 4).t()]
    elif case == "read after the update":
        def f(x, y):
            old = x * 2
            x.add_(y)
            return old + x.sum()
        make = [_randn(4, 3), _randn(4, 3)]
    elif case == "from a reduction":
        def f(x):
            x.copy_(x.sum(1, keepdim=True).expand_as(x))
            return x.amax()
        make = [_randn(3, 6)]
    elif case == "cast":
        def f(x, y):
            x.copy_(y * 3)  # float32 into float16
            return y + 1
        make = [lambda: torch.zeros(4, 4, dtype=torch.float16), _randn(4, 4)]
    else:
        def f(x, y):
            x.add_(y)
            y.mul_(2)
            return x + y
        make = [_randn(5), _randn(5)]
    _run_both(f, *make, calls=3)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs CUDA (CUDA Graph replays)"))])
def test_a_compiled_sgd_step_with_momentum_follows_eager(device):
    """Several steps of a compiled optimizer (its parameters and momentum buffers are written in
    place), in the default and the reduce-overhead mode (on CUDA: replays, whose warm-ups must
    not apply the update)."""
    for mode in ("default", "reduce-overhead"):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.Linear(5, 3)).to(device)
        twin = copy.deepcopy(model)
        opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, foreach=True) for m in (model, twin)]
        step = pipec.compile(opts[1].step, mode=mode)
        for k in range(4):
            for m in (model, twin):
                for p in m.parameters():
                    p.grad = torch.full_like(p, 0.1 * (k + 1))
            opts[0].step()
            step()
        torch.testing.assert_close(dict(twin.named_parameters()), dict(model.named_parameters()))


def test_a_cache_written_with_index_copy_is_scattered_in_place(tmp_path):
    """A static KV cache's update (`index_copy_` at the new positions): the scatter launch writes
    into the cache itself, with no init launch copying the whole cache first."""
    def f(cache, key, pos):
        cache.index_copy_(2, pos, key)
        return cache.sum(2)

    compiled = pipec.compile(f, dump_dir=str(tmp_path))
    for start in (0, 3):
        cache = torch.randn(2, 3, 8, 4)
        key, pos = torch.randn(2, 3, 2, 4), torch.arange(start, start + 2)
        expected_cache = cache.clone()
        expected = f(expected_cache, key, pos)
        torch.testing.assert_close(compiled(cache, key, pos), expected)
        torch.testing.assert_close(cache, expected_cache)
    text = _program_text(tmp_path)
    assert "_init(" not in text and "inplace=" in text, text

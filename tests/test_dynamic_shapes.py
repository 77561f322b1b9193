"""Dynamic shapes end to end: one compiled model serves many sizes (CPU: Triton's interpreter).

Counts are backend invocations (`session.dynamo_graphs`: graphs pipec compiled).
"""

import warnings

import pytest
import torch
from torch import nn

import pipec
import pipec_ir
from pipec_runtime_cudagraph.buckets import PadPolicy
from pipec_runtime_cudagraph.launch import ProgramRunner

from conftest import EXAMPLES, check_dynamic_training, load_example

SIZES = (1, 17, 64, 1000)


def example(stem):
    return load_example(next(p for p in EXAMPLES if p.stem == stem))[0]


def norm_softmax(d=8):
    """examples/norm_softmax.py's model, narrow (Triton's interpreter is slow on wide rows)."""
    model = type(example("norm_softmax"))(d).eval()
    with torch.no_grad():
        model.norm.weight.uniform_(0.5, 1.5)
        model.norm.bias.uniform_(-0.5, 0.5)
    return model


def check(compiled, model, *inputs):
    with torch.no_grad():
        torch.testing.assert_close(compiled(*inputs), model(*inputs), atol=2e-5, rtol=2e-5)


@pytest.mark.parametrize("order, counts", [(SIZES, [1, 2, 2, 2]), ((17, 64, 1000, 1), [1, 2, 2, 3])],
                         ids=["small-first", "one-last"])
def test_mlp_one_artifact_for_every_size(order, counts):
    """dynamic=None: static first, symbolic after the size changes (Dynamo's automatic dynamic
    shapes through pipec's backend), then no recompile for sizes >= 2; size 1 after a symbolic
    graph compiles its own (the symbolic graph is guarded by size >= 2, as in torch.compile)."""
    model = example("mlp_gelu")
    compiled = pipec.compile(model)
    seen = []
    for n in order:
        check(compiled, model, torch.randn(n, 32))
        seen.append(compiled.pipec_session.dynamo_graphs)
    assert seen == counts, seen
    check(compiled, model, torch.randn(order[0], 32))  # the first size again: no compile either
    assert compiled.pipec_session.dynamo_graphs == counts[-1]
    assert len(compiled.pipec_budget.events) == counts[-1] - 1  # recompiles are charged to the budget


def test_size_oblivious_opt_in_serves_size_one_on_the_same_graph():
    """size_oblivious=True: the symbolic graph also serves size 1 (no recompile), with a warning
    that results depending on a size being 1 are not guarded."""
    model = example("mlp_gelu")
    with pytest.warns(UserWarning, match="size_oblivious=True"):
        compiled = pipec.compile(model, size_oblivious=True)
    for n in (17, 64, 1):
        check(compiled, model, torch.randn(n, 32))
    assert compiled.pipec_session.dynamo_graphs == 2


@pytest.mark.parametrize("dynamic", [None, True])
def test_result_that_depends_on_a_size_being_one(dynamic):
    """A squeeze of a dynamic dim, and a broadcast of it: size 1 after larger sizes must give
    eager's shape and values (size-oblivious tracing dropped the squeeze there)."""
    def squeeze_sum(x):
        return x.squeeze(0).sum(0)

    def broadcast(x, y):
        return (x + y).sum(0)

    compiled_squeeze = pipec.compile(squeeze_sum, dynamic=dynamic)
    compiled_broadcast = pipec.compile(broadcast, dynamic=dynamic)
    for n, m in ((5, 5), (3, 3), (1, 3)):
        x, y = torch.randn(n, 4), torch.randn(m, 4)
        torch.testing.assert_close(compiled_squeeze(x), squeeze_sum(x))
        torch.testing.assert_close(compiled_broadcast(x, y), broadcast(x, y))


def test_norm_softmax_dynamic_batch_and_sequence():
    model = norm_softmax()
    compiled = pipec.compile(model)
    shapes = [(1, 1), (17, 64), (64, 17), (1000, 1), (1, 1000), (3, 5)]
    for b, t in shapes:
        check(compiled, model, torch.randn(b, t, 8))
    # (1, 1) static; (17, 64) symbolic, guarded >= 2; (1000, 1) and (1, 1000) a size-1 graph each
    assert compiled.pipec_session.dynamo_graphs == 4
    assert compiled.pipec_session.eager_graphs == 0


def test_dynamic_true_compiles_once_with_symbols(tmp_path):
    model = norm_softmax()
    with pytest.warns(UserWarning, match="size_oblivious=True"):  # as reduce-overhead's buckets want
        compiled = pipec.compile(model, dynamic=True, size_oblivious=True, dump_dir=str(tmp_path))
    for b, t in ((1, 3), (17, 3), (64, 1), (2, 1000)):
        check(compiled, model, torch.randn(b, t, 8))
    assert compiled.pipec_session.dynamo_graphs == 1
    [program] = [pipec_ir.loads(p.read_text()) for p in tmp_path.glob("*.codegen.json")]
    assert {s.name for s in program.symbols} == {"s0", "s1"}
    assert all(s.lower <= 1 for s in program.symbols)  # 0/1 are not specialized away
    assert program.pad_symbols == ("s0", "s1")


@pytest.mark.parametrize("slices", ["torch", "unbacked"])
def test_symbolic_views_counts_and_slices_match_eager(slices, request):
    """Symbolic counts (mean/var/layer_norm over a dynamic dim), view steps with symbolic
    shapes (reshape before a matmul), slices and selects that count from a dynamic end; also
    with torch 2.11's fake slice, which gives `x[:, -3:]` an unbacked length (the fixture)."""
    if slices == "unbacked":
        request.getfixturevalue("unbacked_slices")
    w = torch.randn(16, 8)

    def f(x):
        m = x.mean(dim=1)
        v = x.var(dim=(0, 1))
        ln = nn.functional.layer_norm(x.transpose(1, 2), (x.shape[1],))
        y = (x.reshape(-1, 16) @ w).reshape(x.shape[0], x.shape[1], 8).sum(1)
        return m, v, ln, y, x[:, -3:] * 2, x[:, -1]

    # the fixture's unbacked lengths are what size-oblivious tracing makes of these slices
    oblivious = slices == "unbacked"
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "pipec: size_oblivious=True")
        compiled = pipec.compile(f, dynamic=True, size_oblivious=oblivious)
    for b, t in ((2, 5), (3, 7), (1, 4), (5, 33)):
        check(compiled, f, torch.randn(b, t, 16))
    # one symbolic graph, plus one for batch 1 unless traced size-obliviously
    assert compiled.pipec_session.dynamo_graphs == (1 if oblivious else 2)
    assert compiled.pipec_session.extern_ops.keys() <= {"aten.mm.default"}


def test_budget_exceeded_warns_once_and_runs_eagerly():
    model = example("mlp_gelu")
    compiled = pipec.compile(model, dynamic=False, recompile_limit=2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for n in (3, 4, 5, 6, 7, 8):
            check(compiled, model, torch.randn(n, 32))
    budget_warnings = [w for w in caught if issubclass(w.category, pipec.RecompileLimitWarning)]
    assert len(budget_warnings) == 1
    assert "recompile_limit=2" in str(budget_warnings[0].message)
    session = compiled.pipec_session
    assert session.dynamo_graphs == 3  # the first compile + 2 recompiles
    assert session.eager_graphs >= 1  # sizes 6.. run eagerly
    check(compiled, model, torch.randn(4, 32))  # a compiled size still runs compiled
    assert session.dynamo_graphs == 3


def test_budget_exceeded_under_fullgraph_raises():
    model = example("mlp_gelu")
    compiled = pipec.compile(model, dynamic=False, fullgraph=True, recompile_limit=1)
    check(compiled, model, torch.randn(3, 32))
    check(compiled, model, torch.randn(4, 32))
    with pytest.raises(pipec.RecompileLimitError, match="recompile_limit=1"):
        compiled(torch.randn(5, 32))


def test_bad_dynamic_options_are_rejected():
    with pytest.raises(ValueError, match="bucket"):
        pipec.compile(nn.Linear(2, 2), bucket="log")
    with pytest.raises(ValueError, match="recompile_limit"):
        pipec.compile(nn.Linear(2, 2), recompile_limit=-1)


# ------------------------------------------------------------ padding (CUDA Graph buckets), on CPU


def _program(model, *inputs):
    """The Program of the dynamic graph pipec compiles for `model`."""
    from pipec.pipeline import compile_graph

    programs = []

    def backend(gm, example_inputs):
        from pipec_capture import make_dynamo_backend

        def compile_aten(aten_gm, aten_inputs, kind):
            programs.append(compile_graph(aten_gm, aten_inputs, pipec.make_options(dynamic=True),
                                          stop_after="codegen"))
            return lambda args: aten_gm(*args)
        return make_dynamo_backend(compile_aten)(gm, example_inputs)

    from torch.fx.experimental import _config as fx_config

    with torch.no_grad(), fx_config.patch(backed_size_oblivious=True):  # as pipec.compile traces
        torch.compile(model, backend=backend, dynamic=True)(*inputs)
    [program] = programs
    return program


@pytest.mark.parametrize("stem, shape, pad", [
    ("mlp_gelu", (5, 32), ("s0",)),
    ("norm_softmax", (3, 5, 8), ("s0", "s1")),
])
def test_padded_runs_equal_exact_runs(stem, shape, pad):
    """What a CUDA Graph recorded for a size bucket computes (inputs zero-padded to the bucket,
    outputs sliced back) equals the exact-size run."""
    program = _program(norm_softmax() if stem == "norm_softmax" else example(stem), torch.randn(*shape))
    assert program.pad_symbols == pad
    runner = ProgramRunner(program, pipec_ir.CompileOptions())
    policy = PadPolicy(runner, "pow2")
    for sizes in ((17, 3), (1, 1), (33, 6)):
        inputs = [torch.randn(tuple(int(d.subs({s: sizes[int(s.name[1:])] for s in d.free_symbols}))
                                    for d in b.type.shape), dtype=getattr(torch, b.type.dtype))
                  for b in program.inputs]
        inputs, symvals, device = runner.prepare(inputs)
        assert policy.graph_values(symvals) != symvals or max(symvals) == 1
        for got, want in zip(policy.run_padded(inputs, symvals, device), runner.run(inputs, symvals, device)):
            torch.testing.assert_close(got, want)


def test_library_calls_on_dynamic_dims_are_not_padded():
    program = _program(example("gpt2_block"), torch.randn(2, 5, 64))
    assert {s.name for s in program.symbols} == {"s0", "s1"}
    assert program.pad_symbols == ()  # attention runs as a library call: opaque, never padded


def test_extern_with_a_symbolic_argument():
    def f(x):
        return torch.topk(x, x.shape[0], dim=1).values * 2  # an extern taking a size expression

    compiled = pipec.compile(f, dynamic=True)
    check(compiled, f, torch.randn(3, 5))  # topk of a symbolic k is ATen's kernel: a library call
    for shape in ((1, 2), (6, 7)):
        check(compiled, f, torch.randn(shape))
    assert compiled.pipec_session.dynamo_graphs == 2  # the symbolic graph, and (1, 2)'s


def test_a_comparison_with_a_symbolic_size():
    """`x < n` with n a size of x: the comparison's operand is a size expression, which promotes
    as the Python int it is (capture failed on it and ran the graph eagerly: EnCodec's padding)."""
    def f(x):
        return torch.where(x * 4 < x.shape[-1], x, -x) + (x.shape[0] > x).float()

    compiled = pipec.compile(f, dynamic=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="pipec")
        for n in (5, 9):
            x = torch.arange(n * 3, dtype=torch.float32).reshape(3, n) / 3
            torch.testing.assert_close(compiled(x), f(x))


def test_an_int_argument_under_dynamic_true():
    """dynamic=True makes an int argument a symbol whose range has no bounds ([-int_oo, int_oo]);
    capture read its lower bound with int(), which raises AttributeError on -int_oo (found by the
    fuzzer: its programs' int parameters are such arguments)."""
    def f(x, k):
        return x * k + torch.arange(x.shape[0]) % k

    compiled = pipec.compile(f, dynamic=True)
    for n, k in ((4, 3), (6, 5)):
        x = torch.randn(n)
        torch.testing.assert_close(compiled(x, k), f(x, k))


@pytest.fixture()
def unbacked_slices(monkeypatch):
    """torch 2.11's fake slice: where the length of `x[:, -3:]` on a dynamic dim needs Max(...),
    it gave the result an unbacked length (u0) and storage offset (u1) instead (torch 2.13
    writes the expressions)."""
    from torch._subclasses import fake_impls
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

    op = torch.ops.aten.slice.Tensor
    original = fake_impls.op_implementations_dict[op]

    def slice_with_unbacked_length(fake_mode, func, self, dim=0, start=None, end=None, step=1):
        out = original(fake_mode, func, self, dim, start, end, step)
        dim = dim % self.dim()
        length = out.shape[dim]
        if not isinstance(length, torch.SymInt) or "Max" not in str(length.node.expr) \
                or free_unbacked_symbols(length):
            return out
        unbacked = fake_mode.shape_env.create_unbacked_symint()
        torch._check(unbacked >= 0)
        torch._check(unbacked <= self.shape[dim])
        sizes = list(out.shape)
        sizes[dim] = unbacked
        offset = out.storage_offset()  # 16*Max(0, s1 - 3): 2.11 leaves it unbacked too (u1)
        if isinstance(offset, torch.SymInt) and "Max" in str(offset.node.expr):
            offset = fake_mode.shape_env.create_unbacked_symint()
            torch._check(offset >= 0)
        return self.as_strided(sizes, out.stride(), offset)

    monkeypatch.setitem(fake_impls.op_implementations_dict, op, slice_with_unbacked_length)


@pytest.mark.filterwarnings("ignore:pipec. size_oblivious=True")
def test_slices_with_unbacked_lengths_match_eager(unbacked_slices):
    """A slice length torch left unbacked is Python's slice length of the dynamic size (u0 =
    Max(s1 - Max(s1 - 3, 0), 0)), not a data-dependent size: pipec defines it and compiles."""
    def f(x):
        return x[:, -3:] * 2, x[:, 1:-1].sum(1), x[:, ::2] + 1

    compiled = pipec.compile(f, dynamic=True, size_oblivious=True)  # what leaves the lengths unbacked
    for b, t in ((2, 5), (3, 7), (1, 2), (4, 9)):
        check(compiled, f, torch.randn(b, t, 4))
    assert compiled.pipec_session.dynamo_graphs == 1
    assert not compiled.pipec_session.extern_ops


# size-oblivious tracing is what leaves these lengths unbacked (u0) rather than guarded
@pytest.mark.filterwarnings("ignore:pipec. size_oblivious=True")
def test_a_returned_unbacked_slice_length_is_recomputed(unbacked_slices):
    """A graph that returns such a length (u0) as a size: the backend reruns the slice on meta
    tensors of the call's sizes to read it off (graph_call._unbacked_sources)."""
    def f(x):
        tail = x[:, -3:]
        return tail * 2, tail.shape[1] + x.shape[0]

    compiled = pipec.compile(f, dynamic=True, size_oblivious=True)
    for b, t in ((2, 5), (3, 2), (1, 9)):
        x = torch.randn(b, t, 4)
        out, size = compiled(x)
        torch.testing.assert_close(out, f(x)[0])
        assert size == min(3, t) + b
    assert compiled.pipec_session.dynamo_graphs == 1


@pytest.mark.filterwarnings("ignore:pipec. size_oblivious=True")
def test_training_through_an_unbacked_slice_length(unbacked_slices):
    """The backward graph takes the forward's unbacked slice length u0 as an int: it is a
    size-only input there, its hint the definition's value (SymbolTable.input_size)."""
    check_dynamic_training(lambda x: (x[:, -3:] * 2).sum(1) + x[:, -1], (5, 7, 2), size_oblivious=True)


def test_a_cross_entropy_loss_trains_at_every_batch_size_without_externs():
    """Linear -> cross_entropy under dynamic=True: nll_loss's gather (forward) and its one-hot
    scatter (backward) lower to kernels at symbolic sizes, so no op falls back to ATen, and the
    loss and every gradient match eager's at each batch size, from one compile per direction."""
    torch.manual_seed(0)
    head = nn.Linear(8, 40)
    loss_fn = lambda x, t: nn.functional.cross_entropy(head(x), t)  # noqa: E731
    torch._dynamo.reset()
    compiled = pipec.compile(loss_fn, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        for rows in (6, 13):
            x, t = torch.randn(rows, 8, requires_grad=True), torch.randint(0, 40, (rows,))
            got = compiled(x, t)
            got.backward()
            grads = (x.grad, head.weight.grad, head.bias.grad)
            x.grad = head.weight.grad = head.bias.grad = None
            want = loss_fn(x, t)
            want.backward()
            torch.testing.assert_close(got, want)
            for g, w in zip(grads, (x.grad, head.weight.grad, head.bias.grad)):
                torch.testing.assert_close(g, w)
            x.grad = head.weight.grad = head.bias.grad = None
    assert [g.kind for g in compiled.pipec_session.graphs] == ["forward", "backward"]


def serves_every_length_without_externs(fn):
    """`pipec.compile(fn, dynamic=True)` on token ids of two lengths: fallback warnings are
    errors, and each output matches eager's."""
    torch._dynamo.reset()
    compiled = pipec.compile(fn, dynamic=True)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        for length in (5, 9):
            ids = torch.randint(0, 128, (2, length))
            torch.testing.assert_close(compiled(ids), fn(ids), atol=1e-4, rtol=1e-4)


def test_a_transformers_encoder_serves_every_length_without_externs():
    """Tiny BERT under dynamic=True: its embedding lookups lower at symbolic sizes (they were ATen
    fallbacks), so no op runs through torch, and two sequence lengths match eager's outputs."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.BertModel(cfg).eval()
    serves_every_length_without_externs(lambda ids: model(ids).last_hidden_state)


def test_a_swin_model_serves_new_resolutions_without_running_eagerly():
    """Tiny two-stage Swin called at 16 and 20 pixels through one compiled model. At the second
    call Dynamo retraces with a symbolic height and width, and 5 patches are padded up to a
    multiple of the window:
    - the window grid's size, padded and cut back, reaches the residual add in two spellings
      torch's guards make equal: pipec asks torch in torch's own spelling of each (the graph ran
      eagerly before session 30);
    - the second stage pads a grid viewed as rows of the padded height, `(A*B) // C`: the pad is
      generated only where capture proves that size never 0 (`surely_at_least`; an extern call
      with a warning before session 31)."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.SwinConfig(image_size=16, patch_size=4, embed_dim=8, depths=[1, 1], num_heads=[2, 2],
                                  window_size=2)
    torch.manual_seed(0)
    model = transformers.SwinModel(cfg).eval()
    compiled = pipec.compile(model)
    for side in (16, 20):
        x = torch.randn(1, 3, side, side)
        with warnings.catch_warnings():
            warnings.filterwarnings("error", message="pipec")
            with torch.no_grad():
                got = compiled(pixel_values=x).last_hidden_state
        torch.testing.assert_close(got, model(pixel_values=x).last_hidden_state, atol=1e-5, rtol=1e-4)


def test_a_decoder_with_its_kv_cache_serves_every_length_without_externs():
    """Tiny GPT-2 under dynamic=True with its KV cache on: the cache's concat lowers at symbolic
    sizes (it was an ATen fallback), and logits at two lengths match eager's."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    serves_every_length_without_externs(lambda ids: model(ids, use_cache=True).logits)


def test_a_language_model_loss_under_dynamic_shapes_keeps_its_backward_scatter_in_kernels():
    """Tiny GPT-2 trained under dynamic=True: its labels and logits are sized by different symbols
    that the trace's guards make equal, and the loss's one-hot backward still lowers to pointwise
    math (no `scatter` fallback), as does its embeddings' backward; no op falls back to torch at
    all; loss and gradients match eager's."""
    transformers = pytest.importorskip("transformers")
    import copy

    cfg = transformers.GPT2Config(vocab_size=128, n_positions=32, n_embd=32, n_layer=1, n_head=2,
                                  resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg).train()
    eager = copy.deepcopy(model)
    ids = torch.randint(0, 128, (2, 7))
    torch._dynamo.reset()
    compiled = pipec.compile(lambda i, labels: model(i, labels=labels, use_cache=False).loss, dynamic=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = compiled(ids, ids)
        loss.backward()
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, pipec.PipecFallbackWarning)]
    # nothing runs through torch: the one-hot backward, the embeddings' backward, the labels'
    # shift (a pad by a size expression), the slices' backward and the position lookups all lower
    assert not fallbacks, fallbacks
    want = eager(ids, labels=ids, use_cache=False).loss
    want.backward()
    torch.testing.assert_close(loss, want, atol=1e-4, rtol=1e-4)
    for (name, p), (_, q) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)


def test_an_encoder_decoder_serves_every_length_without_externs():
    """Tiny T5 under dynamic=True, the decoder shorter than the encoder and one source padded by a
    mask written in place (a slice_scatter and a select_scatter at symbolic sizes, which were ATen
    fallbacks that sent the whole graph to eager): no op runs through torch, two lengths match eager's."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.T5Config(vocab_size=128, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_heads=4,
                                dropout_rate=0.0, decoder_start_token_id=0)
    torch.manual_seed(0)
    model = transformers.T5ForConditionalGeneration(cfg).eval()

    def fn(ids):  # the decoder's length differs from the encoder's; the second source is padded
        mask = torch.ones_like(ids)
        mask[1, -2:] = 0
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=ids[:, 1:]).logits
    serves_every_length_without_externs(fn)


def trains_like_eager(model, batches, image: int, **compile_kwargs):
    """Compile `model` (train mode) and step it beside an eager copy of it on batches
    of the given sizes (3 x image x image), fallback warnings as errors: outputs, gradients and
    buffers (BatchNorm's running statistics) must match eager's. Returns the compiled model."""
    import copy

    eager = copy.deepcopy(model)
    torch._dynamo.reset()
    compiled = pipec.compile(model, **compile_kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        for n in batches:
            x = torch.randn(n, 3, image, image)
            got, want = compiled(x), eager(x)
            got.square().sum().backward()
            want.square().sum().backward()
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
            for (name, p), q in zip(model.named_parameters(), eager.parameters()):
                torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4, msg=name)
                p.grad = q.grad = None
            for (name, b), c in zip(model.named_buffers(), eager.buffers()):
                torch.testing.assert_close(b, c, atol=1e-5, rtol=1e-5, msg=name)
    return compiled


def test_batch_norm_trains_under_dynamic_shapes_like_eager():
    """BatchNorm in training mode at a symbolic batch: its running variance's unbiased correction
    n / (n - 1) is Python arithmetic on sizes giving a float (a SymFloat), which sent the whole
    graph to eager; the program now computes it: outputs, gradients and running statistics match
    eager's at two batch sizes, with no fallback."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()).train()
    trains_like_eager(model, (2, 5), 6, dynamic=True)


def test_pooling_over_a_changing_batch_trains_like_eager():
    """A conv net whose batch changes between calls (automatic dynamic shapes: the batch becomes
    symbolic, the image stays static): max pooling with its indices and its backward, and average
    pooling, lower at the symbolic batch (they were ATen fallbacks); outputs, gradients and
    BatchNorm's running statistics match eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          nn.AvgPool2d(2)).train()
    # the second call recompiles with a symbolic batch, the third reuses it
    compiled = trains_like_eager(model, (2, 3, 5), 8)
    assert compiled.pipec_session.dynamo_graphs == 2  # static first, then one symbolic graph


def test_padding_up_to_a_multiple_under_dynamic_shapes():
    """Padding a symbolic length up to a multiple of a window (Swin's windows: the pad is Python's
    `(-s) % 4`) and cutting it back after a window partition: torch's Mod of a negative base became
    a ModularIndexing that the kernels computed with C's `%`, so the padded size came out as
    s - s % 4 and the kernels read garbage (1e28 off); now eager's values at every length."""
    import torch.nn.functional as F

    def fn(x):
        h = x.shape[1]
        y = F.pad(x, (0, 0, 0, (4 - h % 4) % 4)) * 2
        win = y.view(y.shape[0], y.shape[1] // 4, 4, -1).transpose(1, 2).reshape(y.shape)
        return win[:, :h].contiguous() + 1

    torch._dynamo.reset()
    compiled = pipec.compile(fn, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        for length in (6, 10, 12, 7):
            x = torch.randn(2, length, 3)
            torch.testing.assert_close(compiled(x), fn(x))


def test_a_slice_guarded_equal_to_the_length_broadcasts():
    """MPT's ALiBi bias, cut to the key length as `bias[..., max(0, 64 - k):]`: its last size is
    `64 - Max(0, 64 - s)`, which Dynamo guards equal to the scores' `s` without rewriting it.
    The add must broadcast on that guard (read with torch's own Max), not refuse the graph: its
    decode steps ran eagerly under `generate`."""
    def biased(scores, bias):
        cut = bias[:, :, max(0, bias.size(2) - scores.size(-1)):]
        return scores + cut

    bias = torch.randn(4, 1, 64)
    compiled = pipec.compile(biased, dynamic=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", pipec.PipecFallbackWarning)
        for length in (5, 9, 13):
            scores = torch.randn(2, 4, 1, length)
            torch.testing.assert_close(compiled(scores, bias), biased(scores, bias))

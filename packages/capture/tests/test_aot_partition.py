"""How training graphs are split (aot.py, option `aot_partition`): the min cut (the default, as
Inductor) saves less for the backward and recomputes cheap pointwise values there."""

import pytest
import torch

from pipec_capture.aot import core_decompositions, make_dynamo_backend, partition_function


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down, self.norm = torch.nn.Linear(16, 64), torch.nn.Linear(64, 16), torch.nn.LayerNorm(64)

    def forward(self, x):
        return self.down(self.norm(torch.nn.functional.gelu(self.up(x)) * 2 + 1))


def saved_for_backward(partition: str):
    """(shapes of the forward's outputs the backward reads, the input's gradient)."""
    saved = []

    def forward_graph(gm, kind):
        if kind == "forward":
            out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
            saved.extend(tuple(o.meta["val"].shape) for o in out[1:] if isinstance(o, torch.fx.Node))

    torch.manual_seed(0)
    model, x = Mlp(), torch.randn(8, 16, requires_grad=True)
    _train_step(model, x, partition, forward_graph)
    return saved, x.grad


def _train_step(model, x, partition: str, look) -> None:
    """One forward and backward of `model` through the Dynamo backend, each AOT graph shown to
    `look(graph_module, kind)` and then run as it is."""
    def compile_aten_graph(gm, example_inputs, kind):
        look(gm, kind)
        return lambda args: gm(*args)

    torch._dynamo.reset()
    backend = make_dynamo_backend(compile_aten_graph, decompositions=core_decompositions(), partition=partition)
    torch.compile(model, backend=backend)(x).sum().backward()


def test_the_min_cut_recomputes_pointwise_values_instead_of_saving_them():
    """Linear -> GELU * 2 + 1 -> LayerNorm -> Linear: the default split saves the product, the
    GELU chain's result and the norm's output; the min cut recomputes the GELU chain from the
    product in the backward. The gradients are the same."""
    min_cut, grad = saved_for_backward("min_cut")
    default, grad_default = saved_for_backward("default")
    assert default.count((8, 64)) == 3
    assert min_cut.count((8, 64)) == 2
    torch.testing.assert_close(grad, grad_default)


def test_an_unknown_partition_is_a_clear_error():
    with pytest.raises(ValueError, match="aot_partition must be one of min_cut, default"):
        partition_function("greedy")


def test_a_vocabulary_loss_saves_its_bf16_logits_and_row_statistics():
    """bf16 logits -> float -> cross_entropy: autograd saves the fp32 log-probabilities for the
    log-softmax backward through a detach, which the min cut would count as an op that cannot
    fuse; with the detaches stripped it saves the bf16 logits and two row statistics and
    recomputes the log-probabilities in the backward. The gradients match eager's."""
    saved = []

    def compile_aten_graph(gm, example_inputs, kind):
        if kind == "forward":
            out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
            saved.extend((tuple(o.meta["val"].shape), o.meta["val"].dtype) for o in out[1:]
                         if isinstance(o, torch.fx.Node))
        return lambda args: gm(*args)

    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 100).to(torch.bfloat16)
    x = torch.randn(32, 16, generator=g, dtype=torch.bfloat16, requires_grad=True)
    t = torch.randint(0, 100, (32,), generator=g)
    loss_fn = lambda x, t: torch.nn.functional.cross_entropy(head(x).float(), t)  # noqa: E731
    loss_fn(x, t).backward()
    want = x.grad.clone()
    x.grad = None
    torch._dynamo.reset()
    backend = make_dynamo_backend(compile_aten_graph, decompositions=core_decompositions())
    torch.compile(loss_fn, backend=backend)(x, t).backward()
    assert ((32, 100), torch.float32) not in saved
    assert ((32, 100), torch.bfloat16) in saved and ((32, 1), torch.float32) in saved
    torch.testing.assert_close(x.grad, want)


@pytest.mark.parametrize("with_forward", [True, False])
def test_the_backward_is_compiled_with_the_forward(with_forward):
    """With `backward_with_forward` (option early_compile) AOTAutograd hands over the backward
    right after the forward, before any backward call (the runtime's worker pool then compiles
    the forward's kernels while the backward is lowered); without it, at the first backward.
    The gradients are eager's either way."""
    kinds = []

    def compile_aten_graph(gm, example_inputs, kind):
        kinds.append(kind)
        return lambda args: gm(*args)

    torch.manual_seed(0)
    model, x = Mlp(), torch.randn(8, 16, requires_grad=True)
    torch._dynamo.reset()
    backend = make_dynamo_backend(compile_aten_graph, decompositions=core_decompositions(),
                                  backward_with_forward=with_forward)
    out = torch.compile(model, backend=backend)(x)
    if hasattr(torch._functorch.config, "force_non_lazy_backward_lowering"):
        assert kinds == (["forward", "backward"] if with_forward else ["forward"])
    out.sum().backward()
    assert kinds == ["forward", "backward"]
    grad = x.grad
    x.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(grad, x.grad)
    assert getattr(torch._functorch.config, "force_non_lazy_backward_lowering", False) is False  # put back


class Conv1DStack(torch.nn.Module):
    """GPT-2's Conv1D (`addmm(bias, x, weight)`, weight [in, out]) twice: the partitioner saves the
    transposed input (`t(x)`) for each weight's gradient."""

    def __init__(self):
        super().__init__()
        self.w1, self.w2 = torch.nn.Parameter(torch.randn(16, 32) / 4), torch.nn.Parameter(torch.randn(32, 16) / 6)

    def forward(self, x):
        return torch.tanh(x @ self.w1) @ self.w2


@pytest.mark.parametrize("partition", ["min_cut", "default"])
def test_transposes_are_taken_in_the_backward_not_saved(partition):
    """saved_views.py: a saved transpose of a row-major value reached the backward program as a
    transposed input, which its kernels copied to row-major every step; the forward now saves
    the value itself and the backward takes the transpose. Gradients are unchanged."""
    placeholders = []

    def backward_inputs(gm, kind):
        if kind == "backward":
            placeholders.extend(n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder")

    torch.manual_seed(0)
    model, x = Conv1DStack(), torch.randn(8, 16, requires_grad=True)
    _train_step(model, x, partition, backward_inputs)
    grads = [x.grad, model.w1.grad, model.w2.grad]
    assert all(t.is_contiguous() for t in placeholders if t.dim() >= 2)
    x.grad = model.w1.grad = model.w2.grad = None
    model(x).sum().backward()
    for got, want in zip(grads, [x.grad, model.w1.grad, model.w2.grad]):
        torch.testing.assert_close(got, want)


def test_a_transpose_the_model_also_returns_stays_a_transpose():
    """The model returns a transpose the backward reads too: the user output stays the transpose
    (the partitioner saves a node of its own for the backward; saved_views.py leaves a saved node
    that is also a user output alone), and the gradients are eager's."""
    def f(x, w):
        y = (x * 2).t()  # not a view of an input: the forward graph returns it
        return y @ w, y

    torch.manual_seed(0)
    x, w = torch.randn(8, 4, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    torch._dynamo.reset()
    backend = make_dynamo_backend(lambda gm, ex, kind: (lambda args: gm(*args)),
                                  decompositions=core_decompositions())
    out, y = torch.compile(f, backend=backend)(x, w)
    torch.testing.assert_close(y, (x * 2).t())
    (out.sum() + y.sum()).backward()
    grads = [x.grad, w.grad]
    x.grad = w.grad = None
    out, y = f(x, w)
    (out.sum() + y.sum()).backward()
    torch.testing.assert_close(grads, [x.grad, w.grad])


@pytest.mark.parametrize("partition", ["min_cut", "default"])
def test_a_max_pool_input_is_not_saved_for_its_backward(partition):
    """conv -> ReLU -> max pool -> conv: the pool's backward reads its input's layout only
    (aot.pool_inputs_as_shapes), so the ReLU's output is not saved for it; the indices are. The
    backward graph runs as traced (ATen's kernel on the unwritten stand-in) and gives eager's
    gradients."""
    class Stem(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv, self.head = torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.Conv2d(4, 2, 1)

        def forward(self, x):
            return self.head(torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 3, 2, 1))

    saved = []

    def look(gm, kind):
        if kind == "forward":
            out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
            saved.extend((tuple(o.meta["val"].shape), o.meta["val"].dtype) for o in out[1:]
                         if isinstance(o, torch.fx.Node))

    torch.manual_seed(0)
    model, x = Stem(), torch.randn(2, 3, 8, 8, requires_grad=True)
    _train_step(model, x, partition, look)
    # before: the ReLU's output, for the pool (and, split by default, a second copy for the ReLU's
    # own backward); now the min cut keeps the ReLU's mask in bool, the default split that copy
    assert saved.count(((2, 4, 8, 8), torch.float32)) == (0 if partition == "min_cut" else 1), saved
    assert ((2, 4, 4, 4), torch.int64) in saved  # the indices
    grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
    for p in model.parameters():
        p.grad = None
    x_eager = x.detach().clone().requires_grad_()
    model(x_eager).sum().backward()
    torch.testing.assert_close(grads, [p.grad for p in model.parameters()] + [x_eager.grad])

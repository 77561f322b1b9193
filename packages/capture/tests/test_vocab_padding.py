"""A cross-entropy head over a class count that is not a multiple of 8 is computed over padded rows
(pipec_capture.vocab_padding): the rewrite's shape, and its exactness against eager."""

import pytest
import torch
import torch.nn.functional as F

import pipec
from conftest import dynamo_graph
from pipec_capture.vocab_padding import MIN_CLASSES, pad_class_dims


class Head(torch.nn.Module):
    def __init__(self, classes, bias=True, upcast=False, **loss):
        super().__init__()
        self.proj = torch.nn.Linear(16, classes, bias=bias)
        self.upcast, self.loss = upcast, loss

    def forward(self, h, labels):
        logits = self.proj(h)
        flat = (logits.float() if self.upcast else logits).view(-1, logits.shape[-1])
        return F.cross_entropy(flat, labels.view(-1), **self.loss), logits


def _inputs(classes, seed=0):
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, classes, (2, 5), generator=g)
    labels[0, 1] = -100  # an ignored position
    return torch.randn(2, 5, 16, generator=g), labels


def test_the_rewrite_pads_weight_and_bias_and_hands_others_the_real_columns():
    head = Head(1025)
    gm = dynamo_graph(head, *_inputs(1025))
    assert pad_class_dims(gm) == 1
    calls = [(n.target, n.args) for n in gm.graph.nodes if n.op in ("call_function", "call_method")]
    pads = [a for t, a in calls if t is F.pad]
    assert [a[1] for a in pads] == [(0, 0, 0, 7), (0, 7)]
    assert any(t == "view" and a[-1] == 1032 for t, a in calls)
    assert any(t == "contiguous" for t, _ in calls)  # the returned logits: eager's layout
    # each node has the example value Dynamo would have recorded (AOTAutograd's cache needs them)
    values = {n.name: n.meta.get("example_value") for n in gm.graph.nodes if n.op in ("call_function", "call_method")}
    assert all(isinstance(v, torch.Tensor) for v in values.values()), values
    assert [v.shape for n, v in values.items() if n.startswith("pad")] == [(1032, 16), (1032,)]
    assert any(v.shape == (10, 1032) for v in values.values()) and any(v.shape == (2, 5, 1025) for v in values.values())


@pytest.mark.parametrize("loss", [{"label_smoothing": 0.1}, {"weight": "w"}])
def test_losses_that_read_every_class_are_left_alone(loss):
    if "weight" in loss:
        loss = {"weight": torch.ones(1025)}
    gm = dynamo_graph(Head(1025, **loss), *_inputs(1025))
    assert pad_class_dims(gm) == 0


def test_a_head_whose_classes_are_not_the_losses_class_dim_is_left_alone():
    """cross_entropy over [N, L, C] logits takes dim 1 (L) as its classes: padding C would change
    the problem, so the rewrite leaves it."""
    def fn(h, labels):
        logits = torch.nn.functional.linear(h, torch.ones(1025, 16))
        return F.cross_entropy(logits, labels)
    h = torch.randn(2, 5, 16)
    assert pad_class_dims(dynamo_graph(fn, h, torch.randint(0, 5, (2, 1025)))) == 0


def test_a_loss_against_class_probabilities_is_left_alone():
    def fn(h, probabilities):
        return F.cross_entropy(torch.nn.functional.linear(h, torch.ones(1025, 16)), probabilities)
    probabilities = torch.softmax(torch.randn(4, 1025), -1)
    assert pad_class_dims(dynamo_graph(fn, torch.randn(4, 16), probabilities)) == 0


def test_aligned_or_small_heads_are_left_alone():
    assert pad_class_dims(dynamo_graph(Head(1024), *_inputs(1024))) == 0
    assert pad_class_dims(dynamo_graph(Head(MIN_CLASSES - 1), *_inputs(MIN_CLASSES - 1))) == 0


@pytest.mark.parametrize(("bias", "upcast", "reduction"), [(True, False, "mean"), (False, True, "sum"),
                                                           (True, True, "none")])
def test_padded_heads_train_like_eager(bias, upcast, reduction, monkeypatch):
    """Loss, logits and every gradient (the weight's and bias's through the pads) as eager's."""
    from pipec_capture import aot

    padded = []
    monkeypatch.setattr(aot, "pad_class_dims", lambda gm: padded.append(pad_class_dims(gm)) or padded[-1])
    torch.manual_seed(0)
    eager = Head(1025, bias=bias, upcast=upcast, reduction=reduction)
    ours = Head(1025, bias=bias, upcast=upcast, reduction=reduction)
    ours.load_state_dict(eager.state_dict())
    h, labels = _inputs(1025, seed=1)
    torch._dynamo.reset()
    compiled = pipec.compile(ours)
    hs = [h.clone().requires_grad_() for _ in range(2)]
    (loss, logits), (want_loss, want_logits) = compiled(hs[0], labels), eager(hs[1], labels)
    torch.testing.assert_close(loss, want_loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits, want_logits, atol=1e-5, rtol=1e-5)
    assert logits.is_contiguous() and logits.shape == want_logits.shape
    loss.sum().backward()
    want_loss.sum().backward()
    torch.testing.assert_close(hs[0].grad, hs[1].grad, atol=1e-5, rtol=1e-5)
    for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-5, msg=name)
    assert padded == [1]


def test_bf16_autocast_head_trains_like_eager_and_the_option_turns_it_off(monkeypatch):
    """Under bf16 autocast (the -inf bias entries cast to bf16 stay -inf) the padded head's loss
    and gradients are eager's at bf16 tolerance; `pad_classes=False` leaves the graph alone."""
    from pipec_capture import aot

    padded = []
    monkeypatch.setattr(aot, "pad_class_dims", lambda gm: padded.append(pad_class_dims(gm)) or padded[-1])
    torch.manual_seed(0)
    eager = Head(1025)
    h, labels = _inputs(1025, seed=2)
    for option, calls in ((True, [1]), (False, [])):
        ours = Head(1025)
        ours.load_state_dict(eager.state_dict())
        torch._dynamo.reset()
        padded.clear()
        compiled = pipec.compile(ours, pad_classes=option)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss, _ = compiled(h, labels)
            want, _ = eager(h, labels)
        loss.backward()
        want.backward()
        torch.testing.assert_close(loss, want, atol=2e-2, rtol=2e-2)
        for (name, p), q in zip(ours.named_parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad, atol=2e-2, rtol=2e-2, msg=name)
            q.grad = None
        assert padded == calls

"""Training under pipec.compile matches eager: losses over 20 steps, gradients after step 1,
parameters and buffers at the end (fp32, CPU: Triton's interpreter).

Each test trains two copies of one freshly initialized model on the same batches, one eagerly
and one compiled; AOTAutograd's forward and backward graphs both run through pipec's pipeline.
"""

import copy
import json
import subprocess
import sys

import pytest
import torch
from torch.nn import functional as F

import pipec
import pipec_ir
from conftest import ROOT, check_dynamic_training
from training_models import Block, TinyCNN, TinyLM

STEPS = 20
# fp32 kernels sum in a different order than ATen's; 20 optimizer steps amplify that a little
LOSS_TOL = {"rtol": 1e-4, "atol": 1e-5}
PARAM_TOL = {"rtol": 1e-4, "atol": 1e-4}


def lm_batches(vocab: int = 32, batch: int = 2, seq: int = 8, steps: int = STEPS):
    g = torch.Generator().manual_seed(1)
    out = []
    for _ in range(steps):
        idx = torch.randint(0, vocab, (batch, seq + 1), generator=g)
        out.append((idx[:, :-1], idx[:, 1:]))
    return out


def image_batches(steps: int = STEPS):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, 8, 8, generator=g), torch.randint(0, 5, (4,), generator=g)) for _ in range(steps)]


def lm_loss(model, batch):
    return model(*batch)


def classifier_loss(model, batch):
    images, labels = batch
    return F.cross_entropy(model(images), labels)


def train(model, call, loss_fn, batches, make_optimizer):
    """Trains `model` (called through `call`): (losses, gradients after step 1)."""
    opt = make_optimizer(model.parameters())
    losses, first_grads = [], None
    for step, batch in enumerate(batches):
        loss = loss_fn(call, batch)
        loss.backward()
        if step == 0:
            first_grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach())
    return torch.stack(losses), first_grads


def train_eager_and_pipec(make_model, loss_fn, batches, make_optimizer):
    torch.manual_seed(0)
    eager = make_model()
    model = copy.deepcopy(eager)  # the same initial weights and buffers
    compiled = pipec.compile(model)
    eager_losses, eager_grads = train(eager, eager, loss_fn, batches, make_optimizer)
    losses, grads = train(model, compiled, loss_fn, batches, make_optimizer)
    torch.testing.assert_close(grads, eager_grads, msg=lambda m: f"gradients after step 1: {m}")
    torch.testing.assert_close(losses, eager_losses, **LOSS_TOL)
    torch.testing.assert_close(model.state_dict(), eager.state_dict(), **PARAM_TOL)
    assert not torch.equal(losses[0], losses[-1])  # it did train
    return compiled.pipec_session


@pytest.mark.parametrize("use_sdpa,tied", [(False, True), (True, False)], ids=["matmul_attn-tied", "sdpa-untied"])
def test_tiny_lm_trains_like_eager(use_sdpa, tied):
    session = train_eager_and_pipec(
        lambda: TinyLM(use_sdpa=use_sdpa, tied=tied), lm_loss, lm_batches(),
        # SGD, not Adam: the key bias's true gradient is 0 (softmax ignores a per-row shift), and
        # Adam would blow its ~1e-9 rounding noise, which differs between any two kernels, up to lr
        lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, weight_decay=0.01))
    names = [g.name for g in session.graphs]
    assert names == ["tinylm_0", "tinylm_0_backward"], names  # one forward, one backward, no recompiles
    assert all(g.kernel_count > 0 for g in session.graphs)


def test_tiny_cnn_with_batch_norm_trains_like_eager():
    session = train_eager_and_pipec(
        TinyCNN, classifier_loss, image_batches(),
        lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9))
    assert [g.name for g in session.graphs] == ["tinycnn_0", "tinycnn_0_backward"]


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_backward_frees_each_saved_activation_after_reading_it(dynamic):
    """AOTAutograd hands the saved activations over to the compiled backward, which drops each
    after its last reader (the runtime's owned_inputs.py): the first layer's activation, read by
    the backward's last matmuls, is freed only then, but the last layer's, read first, is freed
    before the backward's last library call runs (general path at step 1, specialized at 2)."""
    import gc
    import weakref

    from torch.utils._python_dispatch import TorchDispatchMode

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.__name__.split(".")[0] in ("mm", "addmm"):
                events.append("mm")
            return func(*args, **(kwargs or {}))

    def pack(t):
        if t.dim() == 2 and t.shape[0] == 4 and t.requires_grad is False and t.shape[1] in (16, 24):
            weakref.finalize(t, events.append, f"freed {t.shape[1]}")
        return t

    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 24), torch.nn.ReLU(),
                                torch.nn.Linear(24, 4)).to(device)
    # library matmuls (the op log's landmarks), not Triton templates, on every device
    compiled = pipec.compile(model, dynamic=dynamic, choice="library")
    for _ in range(2):
        events: list = []
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = compiled(torch.randn(4, 8, device=device)).square().sum()
        with Log():
            loss.backward()
        gc.collect()
        assert "freed 24" in events, events
        last_mm = len(events) - 1 - events[::-1].index("mm")
        assert events.index("freed 24") < last_mm, events  # freed while the backward still ran
    names = [g.name for g in compiled.pipec_session.graphs]
    assert names == ["sequential_0", "sequential_0_backward"], names


def test_explain_shows_forward_and_backward_graphs():
    torch.manual_seed(0)
    model = TinyCNN()  # training mode, trainable parameters: explain runs a backward pass too
    images, _ = image_batches(1)[0]
    report = pipec.explain(model, images)
    assert report.training
    kinds = {g["name"]: g["kind"] for g in report.graphs}
    assert kinds == {"tinycnn_0": "forward", "tinycnn_0_backward": "backward"}, kinds
    assert report.graph_count == 1  # one Dynamo graph, compiled as a forward and a backward graph
    assert all(g["kernel_count"] > 0 for g in report.graphs)
    assert report.mismatch is None, report.mismatch
    assert '"kind": "backward"' in report.to_json()


def test_explain_of_eval_model_is_inference_only():
    torch.manual_seed(0)
    model = TinyCNN().eval()
    images, _ = image_batches(1)[0]
    report = pipec.explain(model, images)
    assert not report.training
    assert [g["kind"] for g in report.graphs] == ["inference"]


def test_one_compiled_block_reused_by_every_layer_before_backward():
    """Regional compilation (benchmarks/train_gpt2.py): one compiled function runs every layer,
    so its forward graph runs several times before the backward graph runs for each call."""

    def run_block(block, x):
        return block(x)

    torch.manual_seed(0)
    blocks = torch.nn.ModuleList(Block(16, 2, 8, use_sdpa=True) for _ in range(3))
    twin = copy.deepcopy(blocks)
    compiled = pipec.compile(run_block)
    x = torch.randn(2, 8, 16)
    outs = []
    for layers, call in ((blocks, run_block), (twin, compiled)):
        h = x.clone().requires_grad_()  # like an embedding's output: every layer's input needs grad
        y = h
        for block in layers:
            y = call(block, y)
        y.square().mean().backward()
        outs.append((y.detach(), h.grad))
    torch.testing.assert_close(outs[1], outs[0])
    torch.testing.assert_close({n: p.grad for n, p in twin.named_parameters()},
                               {n: p.grad for n, p in blocks.named_parameters()})
    assert [g.kind for g in compiled.pipec_session.graphs] == ["forward", "backward"]  # compiled once


def test_pipec_explain_command_on_a_training_model(tmp_path):
    model_file = tmp_path / "cnn_training.py"
    model_file.write_text(
        "import sys, torch\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "from training_models import TinyCNN\n"
        "torch.manual_seed(0)\n"
        "model = TinyCNN()  # training mode\n"
        "example_inputs = (torch.randn(4, 3, 8, 8),)\n")
    run = subprocess.run([sys.executable, "-m", "pipec", "explain", str(model_file), "--json"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    assert report["training"] and report["ok"]
    assert [(g["name"], g["kind"]) for g in report["graphs"]] == [
        ("cnn_training_0", "forward"), ("cnn_training_0_backward", "backward")]
    assert all(g["kernel_count"] > 0 for g in report["graphs"])


def test_dynamic_batch_training_matches_eager():
    """With dynamic shapes the forward graph also returns sizes saved for the backward graph."""
    torch.manual_seed(0)
    eager = TinyLM(use_sdpa=True)
    model = copy.deepcopy(eager)
    compiled = pipec.compile(model, dynamic=True)
    g = torch.Generator().manual_seed(3)
    for batch in (2, 3):
        idx = torch.randint(0, 32, (batch, 9), generator=g)
        for m in (eager, compiled):
            m(idx[:, :-1], idx[:, 1:]).backward()
        torch.testing.assert_close({n: p.grad for n, p in model.named_parameters()},
                                   {n: p.grad for n, p in eager.named_parameters()})
    assert [g.kind for g in compiled.pipec_session.graphs] == ["forward", "backward"]  # one symbolic compile


def test_graph_returning_a_size():
    def f(x):
        return x * 2, x.shape[0] * 3 + x.shape[1]

    compiled = pipec.compile(f, dynamic=True)
    for shape in ((2, 5), (4, 3)):
        x = torch.randn(shape)
        out, size = compiled(x)
        torch.testing.assert_close(out, x * 2)
        assert size == shape[0] * 3 + shape[1]


def test_dynamic_training_backward_takes_sizes_only_an_int_carries():
    """The backward of `x.sum(1)` and of `x[:, -3:]` needs the forward input's dim 1, which
    AOTAutograd passes as an int (no tensor of the backward graph has it): the graph takes it
    as a size-only input (docs/IR.md, "Graph"), so the gradients match eager at every size."""
    # lengths >= 4: at 3 the slice from the end starts at 0, a guard of its own (a recompile)
    check_dynamic_training(lambda x: x.sum(1) * 2 + x[:, -3:].mean(1), (5, 7, 4))


def test_bf16_layer_norm_backward_recomputes_instead_of_storing_fp32(tmp_path):
    """The weight and bias gradients' column sums recompute the fp32 output gradient (and
    gradient x x_hat) from the bf16 tensors instead of reading fp32 copies the row kernel stored:
    its only output is the input gradient. Gradients match eager at bf16 tolerance."""
    torch.manual_seed(0)
    model = torch.nn.LayerNorm(64).to(torch.bfloat16)
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
    x = torch.randn(8, 64, dtype=torch.bfloat16, requires_grad=True)
    grad_out = torch.randn(8, 64, dtype=torch.bfloat16)
    model(x).backward(grad_out)
    expected = [x.grad.clone(), model.weight.grad.clone(), model.bias.grad.clone()]
    x.grad = model.weight.grad = model.bias.grad = None
    pipec.compile(model, dump_dir=str(tmp_path))(x).backward(grad_out)
    for got, want in zip([x.grad, model.weight.grad, model.bias.grad], expected):
        torch.testing.assert_close(got, want, atol=3e-2, rtol=1.6e-2)
    (plan_file,) = tmp_path.glob("*_backward.fusion.json")
    plan = pipec_ir.loads(plan_file.read_text())
    (row,) = [k for k in plan.kernels if k.kind == "reduction" and k.reduce_dims == (1,)]
    columns = [k for k in plan.kernels if k.kind == "reduction" and k.reduce_dims == (0,)]
    assert len(row.outputs) == 1 and len(columns) == 2
    assert not any(set(k.inputs) & set(row.outputs) for k in columns)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="bf16 autocast and the vocabulary's long rows on the GPU")
@pytest.mark.parametrize("rows_held", [True, False], ids=["held_rows", "looped_rows"])
def test_vocabulary_loss_under_bf16_autocast_trains_like_eager(rows_held):
    """BERT's masked-LM head at a vocabulary of 30522 (rows of a 32768 block, an unaligned GEMM N):
    the loss and every gradient against eager's under bf16 autocast, with the log-softmax's rows
    held in registers and looped. Exercises the decomposed log-softmax, the gather moved onto the
    logits and the one-hot backward as pointwise math on the GPU."""
    torch.manual_seed(0)
    head = torch.nn.Linear(768, 30522).cuda()
    h = torch.randn(512, 768, device="cuda", requires_grad=True)
    t = torch.randint(0, 30522, (512,), device="cuda")
    t[::7] = -100  # ignored rows
    loss_fn = lambda h, t: F.cross_entropy(head(h), t)  # noqa: E731

    def step(fn):
        h.grad = head.weight.grad = head.bias.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fn(h, t)
        loss.backward()
        return [loss.detach(), h.grad, head.weight.grad, head.bias.grad]

    want = step(loss_fn)
    torch._dynamo.reset()
    options = {} if rows_held else {"persistent_reduction_bytes": 16384}
    got = step(pipec.compile(loss_fn, **options))
    for g, w in zip(got, want):
        torch.testing.assert_close(g.float(), w.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("case", ["vocab_loss", "resnet"])
def test_train_step_benchmark_smoke(tmp_path, case):
    """benchmarks/train_step.py at its tiny size on the CPU: pipec's gradients agree with eager's
    and the results file has every backend's row (resnet: one of the real-model suite's training
    models, which the benchmark runs at real size on the GPU)."""
    if case == "resnet":
        pytest.importorskip("transformers")
    out = tmp_path / "loss.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "train_step.py"), "--case", case,
                           "--device", "cpu", "--tiny", "--backends", "eager,pipec", "--rounds", "1", "--steps", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["backends"]
    assert set(rows) == {"eager", "pipec"} and rows["pipec"]["max_grad_error_vs_first"] < 1e-4


@pytest.mark.parametrize("arch", ["bert", "gpt2"])
def test_transformers_lm_heads_over_an_unaligned_vocabulary_train_like_eager(arch, monkeypatch):
    """transformers' masked-LM head (bias, decoder tied to the embeddings) and causal-LM head (no
    bias, logits upcast in the loss) over 1025 words, logits returned to the caller: each head runs
    over 1032 padded columns (capture vocab_padding.py); the loss, the logits and every gradient
    are eager's."""
    transformers = pytest.importorskip("transformers")
    from pipec_capture import aot
    from pipec_capture.vocab_padding import pad_class_dims

    padded = []
    monkeypatch.setattr(aot, "pad_class_dims", lambda gm: padded.append(pad_class_dims(gm)) or padded[-1])
    if arch == "bert":
        cfg = transformers.BertConfig(vocab_size=1025, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        make = transformers.BertForMaskedLM
    else:
        cfg = transformers.GPT2Config(vocab_size=1025, n_positions=16, n_embd=32, n_layer=1, n_head=2,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        make = transformers.GPT2LMHeadModel
    torch.manual_seed(0)
    model = make(cfg).train()
    eager = copy.deepcopy(model)
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, 1025, (2, 8), generator=g)
    labels = ids.clone()
    labels[0, :3] = -100
    torch._dynamo.reset()
    compiled = pipec.compile(lambda i, y: (lambda out: (out.loss, out.logits))(model(input_ids=i, labels=y)))
    loss, logits = compiled(ids, labels)
    want = eager(input_ids=ids, labels=labels)
    torch.testing.assert_close(loss, want.loss, **LOSS_TOL)
    torch.testing.assert_close(logits, want.logits, rtol=1e-4, atol=1e-4)
    assert logits.shape == want.logits.shape and logits.is_contiguous()
    loss.backward()
    want.loss.backward()
    for (name, p), q in zip(model.named_parameters(), eager.parameters()):
        torch.testing.assert_close(p.grad, q.grad, **PARAM_TOL, msg=name)
    # one Dynamo graph with one padded head, GPT-2's too: its loss property's `warning_once` is a
    # no-op while Dynamo traces (trace_settings.py), not a graph break between head and loss
    assert padded == [1]


class _RouterScale(torch.autograd.Function):
    """A router multiplier as PhiMoE's: the backward's in-place `scatter_add_` is never read back."""

    @staticmethod
    def forward(ctx, scores, index):
        ctx.save_for_backward(scores, index)
        return scores * 2

    @staticmethod
    def backward(ctx, grad):
        scores, index = ctx.saved_tensors
        expanded = scores * grad
        expanded.scatter_add_(-1, index, grad.gather(-1, index))
        return expanded, None


class _AttentionThenRouter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.router = torch.nn.Linear(16, 48), torch.nn.Linear(16, 4)

    def forward(self, x):
        q, k, v = self.qkv(x).view(2, 5, 3, 2, 8).permute(2, 0, 3, 1, 4)
        h = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h.transpose(1, 2).reshape(2, 5, 16) + x
        scores = self.router(h).softmax(-1)
        index = scores.argmax(-1, keepdim=True)
        return _RouterScale.apply(scores, index).gather(-1, index) * h


def test_an_autograd_function_writing_in_place_in_its_backward_trains_as_eager():
    """Capture's Dynamo-graph rewrites (here the attention one) drop dead code; the in-place write
    of the custom backward must survive it, or every gradient before the router is wrong
    (transformers' PhiMoE, hf_sweep --train)."""
    torch.manual_seed(0)
    model, x = _AttentionThenRouter(), torch.randn(2, 5, 16)
    model(x).square().mean().backward()
    expected = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    pipec.compile(model)(x).square().mean().backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(p.grad, expected[name], msg=name)

"""Activation checkpointing under pipec: a checkpointed block's attention (random-tagged, drawing
nothing at dropout 0) compiles, its gradients are eager's, and the forward still saves less than
without checkpointing; a block that does draw runs eagerly with a warning that says why."""

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

import pipec
from pipec.errors import PipecFallbackWarning


class Block(torch.nn.Module):
    def __init__(self, width=32, heads=4, dropout=0.0):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.out = torch.nn.Linear(width, width)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, 4 * width), torch.nn.GELU(),
                                       torch.nn.Linear(4 * width, width))
        self.norm = torch.nn.LayerNorm(width)

    def forward(self, x):
        b, s, w = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, s, 3, self.heads, w // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=self.dropout)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, w))
        return x + self.mlp(x)


class Model(torch.nn.Module):
    def __init__(self, checkpointed=True, dropout=0.0, layers=2):
        super().__init__()
        self.checkpointed = checkpointed
        self.blocks = torch.nn.ModuleList(Block(dropout=dropout) for _ in range(layers))

    def forward(self, x):
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.checkpointed else block(x)
        return x.square().mean()


def saved_bytes(fn, x):
    """Bytes of every tensor autograd saves for the backward while `fn(x)` runs."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = fn(x)
    return total, loss


def test_checkpointed_attention_compiles_with_eager_gradients():
    torch.manual_seed(0)
    model = Model()
    mine = copy.deepcopy(model)
    x = torch.randn(2, 16, 32)
    model(x).backward()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)
        loss = pipec.compile(mine)(x)
        loss.backward()
    torch.testing.assert_close(loss, model(x))
    for (name, p), q in zip(mine.named_parameters(), model.parameters()):
        torch.testing.assert_close(p.grad, q.grad, msg=name)


def test_checkpointing_still_saves_less():
    """Unwrapping the replayed attention must not turn recomputation into saving."""
    torch.manual_seed(0)
    x = torch.randn(2, 16, 32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PipecFallbackWarning)  # both compiled
        plain, _ = saved_bytes(pipec.compile(Model(checkpointed=False)), x)
        torch._dynamo.reset()
        checkpointed, loss = saved_bytes(pipec.compile(Model(checkpointed=True)), x)
    loss.backward()
    assert checkpointed < plain / 2, (checkpointed, plain)


def test_checkpointed_dropout_runs_eagerly_and_says_why():
    torch.manual_seed(0)
    model = Model(dropout=0.1, layers=1)
    x = torch.randn(2, 8, 32)
    with pytest.warns(PipecFallbackWarning, match="activation-checkpointed region"):
        loss = pipec.compile(model)(x)
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())

"""Inputs handed over (`call_owned`): each is dropped after its last reader (owned_inputs.py)."""

from __future__ import annotations

import gc
import weakref

import pytest

from pipec_ir import Buffer, CompileOptions, LoadContext, Program, Ref, Step, make_attrs
from runtime_helpers import T, add_kernel

torch = pytest.importorskip("torch")
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from pipec_runtime_cudagraph import load_launch  # noqa: E402


def _program() -> Program:
    """r = relu(a) (a's last reader), s = a kernel adding b to itself, n = neg(s); returns r, n, b.
    `b` is returned, so it is never dropped."""
    return Program(
        name="owned",
        inputs=(Buffer("a", T([8])), Buffer("b", T([8]))),
        outputs=("r", "n", "b"),
        buffers=(Buffer("r", T([8])), Buffer("s", T([8])), Buffer("n", T([8]))),
        kernels=(add_kernel("k", 8),),
        steps=(Step("extern", "aten.relu.default", ("a",), ("r",), make_attrs(args=(Ref("a"),))),
               Step("launch", "k", ("b", "b"), ("s",)),
               Step("extern", "aten.neg.default", ("s",), ("n",), make_attrs(args=(Ref("s"),)))),
    )


class _OpLog(TorchDispatchMode):
    def __init__(self, log: list):
        super().__init__()
        self.log = log

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__ in ("relu.default", "neg.default"):
            self.log.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def _call(run, owned: bool, device: str) -> tuple[list, list, list]:
    """(the events of one call: relu, neg and `a freed`; its outputs; the list passed)."""
    log: list = []
    a = torch.arange(-4.0, 4.0, device=device)
    b = torch.ones(8, device=device)
    weakref.finalize(a, log.append, "a freed")
    args = [a, b]
    del a
    with _OpLog(log):
        out = run.call_owned(args) if owned else run(args)
    gc.collect()
    return log, out, args


@pytest.fixture
def run(tmp_path):
    return load_launch(_program(), CompileOptions(), LoadContext(kernel_dir=str(tmp_path)))


def test_owned_call_drops_an_input_after_its_last_reader(run):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for call in ("general", "specialized"):
        log, (r, n, b), args = _call(run, True, device)
        assert log == ["relu", "a freed", "neg"], call  # freed before the later steps run
        assert args == []  # the caller's list was taken over
        torch.testing.assert_close(r, torch.arange(-4.0, 4.0, device=device).relu())
        torch.testing.assert_close(n, -2 * b)
        assert b.data_ptr() == b.data_ptr() and torch.equal(b, torch.ones(8, device=device))  # returned, kept
    assert run.specialized, "the second call should have taken the specialized run"


def test_plain_call_leaves_the_callers_list_alone(run):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for _ in range(2):
        log, (r, n, b), args = _call(run, False, device)
        assert log == ["relu", "neg"]  # `a` lives on in the caller's list
        assert len(args) == 2 and b is args[1]
        torch.testing.assert_close(r, args[0].relu())


def test_owned_call_whose_guards_fail_leaves_the_list_for_the_general_path(run):
    """A specialized run whose guards fail returns before taking the list: the general path
    then reads it (a non-contiguous `a`)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for _ in range(2):
        _call(run, True, device)
    a = torch.arange(-8.0, 8.0, device=device)[::2]
    out = run.call_owned([a, torch.ones(8, device=device)])
    torch.testing.assert_close(out[0], a.relu())

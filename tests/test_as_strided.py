"""as_strided addresses memory as eager lays it out: a view's traced strides, not the row-major
order every pipec value has. Longformer (LED) chunks a transposed query with as_strided; read as
row-major, its attention scores were off by 0.08."""

import pytest
import torch

import pipec


def _chunked(x):
    """Longformer's `_chunk` of its query: a projection [seq, batch, heads * dim] seen as [batch *
    heads, seq, dim] (a view, strides (dim, batch * heads * dim, 1)), cut into overlapping windows."""
    s, b, h, d = 8, 2, 2, 3
    y = (x * 2).view(s, b, h, d).transpose(0, 1).transpose(1, 2).reshape(b * h, s, d)
    y = y.view(b * h, 2, 4, d)
    size, stride = list(y.size()), list(y.stride())
    size[1], stride[1] = size[1] * 2 - 1, stride[1] // 2
    return y.as_strided(size=size, stride=stride) + 1


def _transposed_window(x):
    t = (x + 1).t()                                  # strides (1, 6) over a [6, 4] value
    return t.as_strided((3, 2), (1, 6), t.storage_offset() + 2)


@pytest.mark.parametrize("fn, shape", [(_chunked, (8, 2, 6)), (_transposed_window, (6, 4))],
                         ids=["longformer_chunks", "transposed_window"])
def test_as_strided_reads_the_traced_layout(fn, shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    torch.testing.assert_close(pipec.compile(fn)(x), fn(x))


def _broadcast_window(x):
    y = (x * 2).expand(4, 8)                         # stride 0 on dim 0: not one dense block
    return y.as_strided((3, 3), (1, 2)) + 1


def _broadcast_transposed(x):
    y = (x * 2).unsqueeze(0).expand(3, 4, 8).transpose(1, 2)   # strides (0, 1, 8)
    return torch.as_strided(y, (3, 5), (4, 5), 1) * 3


@pytest.mark.parametrize("fn, shape", [(_broadcast_window, (8,)), (_broadcast_transposed, (4, 8))],
                         ids=["expanded", "expanded_transposed"])
def test_as_strided_of_a_broadcast_runs_as_an_extern_on_the_traced_layout(fn, shape):
    """The storage of a broadcast view is its base's: pipec has no lowering for it, and the
    extern call must see the value laid out as traced (stride 0), not materialized."""
    torch.manual_seed(0)
    x = torch.randn(*shape)
    with pytest.warns(UserWarning, match="as_strided.* runs through torch as an extern call"):
        got = pipec.compile(fn, cache="none")(x)
    torch.testing.assert_close(got, fn(x))

"""16-bit convolutions over channels-last operands (conv_layouts.py), on ATen graphs: which convs
are rewritten, which are left, that the values stay eager's and that outputs keep eager's strides.
The pass acts on CUDA only; here it is pointed at the CPU (`devices=("cpu",)`)."""

import torch
import torch.nn.functional as F
from test_sink_gathers import run_graph, targets, traced

from pipec_capture.conv_layouts import convs_channels_last, drop_needless_copies, output_strides, restore_output_strides
from pipec_capture.follow_layouts import follow_layouts

aten = torch.ops.aten
CPU = ("cpu",)


def _tensors(*shapes, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*s, generator=g).to(dtype) for s in shapes]


def _conv_operands(gm):
    """(input, weight) nodes of each convolution of `gm`."""
    return [n.args[:2] for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.convolution.default]


def _stored_nhwc(node) -> bool:
    """`permute(clone(permute(x, [0, 2, 3, 1])), [0, 3, 1, 2])`: x's values stored NHWC."""
    return (node.target is aten.permute.default and list(node.args[1]) == [0, 3, 1, 2]
            and node.args[0].target is aten.clone.default
            and node.args[0].args[0].target is aten.permute.default
            and list(node.args[0].args[0].args[1]) == [0, 2, 3, 1])


def _layout_passes(gm):
    """The capture's layout passes in lower_graph's order; returns the convs rewritten."""
    before = output_strides(gm)
    rewritten = convs_channels_last(gm, CPU)
    follow_layouts(gm)
    drop_needless_copies(gm)
    restore_output_strides(gm, before)
    return rewritten


def test_a_resnet_step_convolves_nhwc_operands_and_returns_eager_strides():
    """silu -> conv -> silu -> conv -> add (bf16): both convs read NHWC input and weight; the
    pointwise ops after them run over their NHWC results; the output comes back row-major."""
    x, w1, w2 = _tensors((2, 8, 6, 6), (16, 8, 3, 3), (8, 16, 3, 3))

    def block(x, w1, w2):
        h = F.conv2d(F.silu(x), w1, padding=1)
        return F.conv2d(F.silu(h), w2, padding=1) + 1

    gm = traced(block, x, w1, w2)
    expected = block(x, w1, w2)
    assert _layout_passes(gm) == 2
    (x1, w1n), (x2, w2n) = _conv_operands(gm)
    assert _stored_nhwc(x1) and _stored_nhwc(w1n) and _stored_nhwc(w2n)
    assert x2.target is aten.permute.default  # the silu, kept over the first conv's NHWC result
    out = run_graph(gm, x, w1, w2)
    torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2)
    assert out.is_contiguous()  # as eager returns it


def test_a_residual_sum_stored_nhwc_is_not_copied_again_for_the_next_conv():
    """ResNet's bottleneck end: relu(conv(a) + conv(b)) feeds the next block's conv and its
    residual add. The first pass copies the sum to NHWC (it was traced NCHW); follow_layouts.py
    then computes the sum over the convs' NHWC results, so the copy would store the same bytes
    again (the two 51 MiB stores that set ResNet-50's peak). The conv reads the sum's own storage."""
    # in the order the graph first reads them (Dynamo's order of the graph's inputs)
    a, w1, b, w2, w3 = _tensors((2, 8, 6, 6), (16, 8, 1, 1), (2, 8, 6, 6), (16, 8, 1, 1), (16, 16, 1, 1))

    def block_end(a, w1, b, w2, w3):
        s = F.relu(F.conv2d(a, w1) + F.conv2d(b, w2))
        return F.relu(F.conv2d(s, w3) + s)

    gm = traced(block_end, a, w1, b, w2, w3)
    expected = block_end(a, w1, b, w2, w3)
    assert _layout_passes(gm) == 3
    x3 = _conv_operands(gm)[2][0]
    assert not _stored_nhwc(x3) and x3.target is aten.permute.default  # the sum's own NCHW view
    assert x3.args[0].target is aten.relu.default  # ... of the relu, computed over NHWC storage
    clones = [n for n in gm.graph.nodes if n.op == "call_function" and n.target is aten.clone.default]
    # a and b copied to NHWC, the output back to row-major (1 x 1 weights are both layouts); the sum never
    assert len(clones) == 3
    out = run_graph(gm, a, w1, b, w2, w3)
    torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2)
    assert out.is_contiguous()


def test_operands_already_channels_last_are_not_copied():
    """A channels-last input (eager's layout too) is read as it is; so is a depthwise conv's
    weight, which is both layouts at once ([C, 1, k, k])."""
    x, w = _tensors((2, 8, 5, 5), (8, 1, 3, 3))
    x = x.contiguous(memory_format=torch.channels_last)

    def depthwise(x, w):
        return F.conv2d(x, w, padding=1, groups=8) * 2

    gm = traced(depthwise, x, w)
    expected = depthwise(x, w)
    assert _layout_passes(gm) == 1
    ((xn, wn),) = _conv_operands(gm)
    assert xn.op == "placeholder" and wn.op == "placeholder"
    out = run_graph(gm, x, w)
    torch.testing.assert_close(out, expected, rtol=1.6e-2, atol=1e-2)
    assert out.stride() == expected.stride()


def test_float32_grouped_transposed_and_other_devices_are_left_alone():
    x32, w32 = _tensors((1, 4, 5, 5), (4, 4, 3, 3), dtype=torch.float32)
    gm = traced(lambda x, w: F.conv2d(x, w), x32, w32)
    assert convs_channels_last(gm, CPU) == 0  # float32

    x, wg, wt = _tensors((1, 8, 5, 5), (8, 4, 3, 3), (8, 4, 3, 3))
    gm = traced(lambda x, w: F.conv2d(x, w, groups=2), x, wg)
    assert convs_channels_last(gm, CPU) == 0  # grouped, not depthwise
    gm = traced(lambda x, w: F.conv_transpose2d(x, w), x, wt)
    assert convs_channels_last(gm, CPU) == 0  # transposed
    gm = traced(lambda x, w: F.conv2d(x, w), x, wt.transpose(0, 1).contiguous())
    assert convs_channels_last(gm) == 0  # the default devices: CUDA only
    assert aten.clone.default not in targets(gm)


def test_an_output_the_trace_made_channels_last_keeps_its_layout():
    """Only outputs the passes moved are copied back: where eager's output is channels-last
    (a channels-last input), pipec's is too, with no copy."""
    x, w = _tensors((2, 8, 5, 5), (8, 8, 3, 3))
    x = x.contiguous(memory_format=torch.channels_last)
    gm = traced(lambda x, w: F.conv2d(x, w, padding=1) * 2, x, w)
    expected = F.conv2d(x, w, padding=1) * 2
    assert _layout_passes(gm) == 1
    out = run_graph(gm, x, w)
    assert out.stride() == expected.stride()
    assert aten.clone.default in targets(gm)  # the weight's NHWC copy, and no other
    assert targets(gm).count(aten.clone.default) == 1


def test_convs_whose_input_or_result_the_graph_returns_are_left_alone():
    """A training forward returns the conv's input and result as saved activations: rewriting
    would store the input twice and copy the result back, so such convs are not rewritten."""
    x, w = _tensors((2, 8, 5, 5), (8, 8, 3, 3))
    gm = traced(lambda x, w: F.conv2d(F.silu(x), w) * 2, x, w)
    assert convs_channels_last(gm, CPU) == 1  # neither is returned
    gm = traced(lambda x, w: (lambda h: (F.conv2d(h, w), h))(F.silu(x)), x, w)
    assert convs_channels_last(gm, CPU) == 0  # its input is returned
    gm = traced(lambda x, w: (lambda c: (F.silu(c), c))(F.conv2d(x, w)), x, w)
    assert convs_channels_last(gm, CPU) == 0  # its result is returned


def test_weights_copied_on_every_call_give_a_hint(monkeypatch):
    """Weights the graph copies to NHWC (graph inputs: parameters) from HINT_BYTES on: a warning
    naming the copy and `model.to(memory_format=torch.channels_last)`; weights already
    channels-last count nothing."""
    import warnings

    import pytest

    from pipec_capture import conv_layouts

    monkeypatch.setattr(conv_layouts, "HINT_BYTES", 2 * 16 * 8 * 3 * 3 * 2)  # both weights below
    x, w1, w2 = _tensors((2, 8, 6, 6), (16, 8, 3, 3), (16, 16, 3, 3))

    def block(x, w1, w2):
        return F.conv2d(F.conv2d(x, w1, padding=1), w2, padding=1) + 1

    ready = w2.contiguous(memory_format=torch.channels_last)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        convs_channels_last(traced(block, x, w1, ready), CPU)  # 2304 bytes copied: below
    with pytest.warns(conv_layouts.PerformanceHint, match=r"2 convolution weights .*channels_last"):
        convs_channels_last(traced(block, x, w1, w2), CPU)

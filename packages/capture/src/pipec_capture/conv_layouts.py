"""16-bit CUDA convolutions over channels-last operands: `conv(x, w)` -> `conv(x', w')`, where `x'`
is `x` stored NHWC (`permute(clone(permute(x, TO_NHWC)), TO_NCHW)`: same values, other storage).

cuDNN's half-precision convolutions on sm80+ are NHWC kernels. Given NCHW tensors, ATen's conv
copies the input and the weight to NHWC with cuDNN's own transpose kernel and the result back
after. On Stable Diffusion 1.5's UNet (real size, H100, pipec under CUDA Graphs, session 33's
kernel profile), those copies took 3.3 ms of the call's 10.5 ms of kernel time: 101 calls of
`nchwToNhwcKernel` (3.13 ms) and 51 of `nhwcToNchwKernel`. Inductor's layout optimization does
what this pass does (torch/_inductor/kernel/conv.py, `require_channels_last`), so its convs run
on NHWC operands its own kernels wrote.

Here each operand that is not channels-last already becomes a clone stored NHWC: for an input,
the kernel that computes it (a group norm's SiLU, say) fuses into the clone and stores NHWC
itself; a weight is copied once per call. The result comes out channels-last, so the pointwise
ops after it stay over NHWC storage (follow_layouts.py, run after this pass). A graph output
that these passes leave in another layout than the trace's row-major one is copied back
(`restore_output_strides`, run after follow_layouts.py), so callers see eager's strides.

Left as they are: other dtypes (float32 convolutions have NCHW kernels of their own), grouped
convolutions that are not depthwise (Inductor measured them slower channels-last), transposed
convolutions, convolutions with symbolic sizes (their layout would need guards), and those
whose input or result the graph returns (a training forward's saved activations).
"""

from __future__ import annotations

import warnings

import torch

from .fx_edit import TO_NCHW, TO_NHWC, call_node, is_permute, meta_val, recompiled_if, replace_node, stored_permuted

aten = torch.ops.aten

LAYOUT_ON = ("cuda",)  # devices whose convolution kernels want channels-last operands
HALF_TYPES = (torch.float16, torch.bfloat16)
HINT_BYTES = 64 << 20  # weights copied per call from which `hint_weight_copies` speaks


class PerformanceHint(UserWarning):
    """pipec could run this model faster if the model changed (a warning category users can filter)."""


def convs_channels_last(gm: torch.fx.GraphModule, devices: tuple[str, ...] | None = None) -> int:
    """Rewrite every eligible 2-d convolution of `gm` on `devices` (default `LAYOUT_ON`) to read
    channels-last operands; returns how many were rewritten."""
    devices = LAYOUT_ON if devices is None else devices
    graph = gm.graph
    rewritten, copied = 0, {}
    for node in list(graph.nodes):
        if not _eligible(node, devices):
            continue
        x, weight, *rest = node.args
        if weight.op == "placeholder" and not _channels_last(meta_val(weight)):
            copied[weight] = meta_val(weight)
        with graph.inserting_before(node):
            operands = [a if _channels_last(meta_val(a)) else stored_permuted(graph, a, TO_NHWC) for a in (x, weight)]
            conv = call_node(graph, aten.convolution.default, (*operands, *rest), {})
        replace_node(graph, node, conv, keep_meta=True)
        rewritten += 1
    hint_weight_copies(list(copied.values()))
    return recompiled_if(gm, rewritten)


def hint_weight_copies(weights: list[torch.Tensor]) -> None:
    """Say, where a graph copies at least HINT_BYTES of convolution weights (graph inputs: the
    model's parameters) to NHWC on every call, that a channels-last model stores them so once.
    SD 1.5's UNet copies 53 weights, 1.1 GB read and written per call: 0.79 of its 7.0 ms of
    kernel time under CUDA Graphs on an H100 (session 37). With the model (and its input)
    channels-last, the graph has no copy left (a small conv net's plan, checked on the CPU).
    Python's default warning filter shows a message once per place, so a model compiled again
    says it once."""
    nbytes = sum(w.numel() * w.element_size() for w in weights)
    if nbytes < HINT_BYTES:
        return
    warnings.warn(f"pipec: {len(weights)} convolution weights ({nbytes / 2**20:.0f} MiB) are copied to "
                  "channels-last on every call (cuDNN's 16-bit kernels read NHWC); "
                  "model.to(memory_format=torch.channels_last) stores them so once", PerformanceHint, stacklevel=2)


def drop_needless_copies(gm: torch.fx.GraphModule) -> int:
    """After follow_layouts.py: a conv input that pass has made channels-last since
    `convs_channels_last` copied it to NHWC reads its own storage, and the copy goes; returns
    how many went.

    `convs_channels_last` runs first and sees a residual sum traced NCHW, so it copies the sum
    to NHWC for the next conv. follow_layouts.py then stores that sum NHWC itself, and the copy
    (`permute(clone(permute(x, TO_NHWC)), TO_NCHW)` with `x` now the NCHW view of NHWC storage)
    stored the same bytes again in the same layout. ResNet-50 (32 x 224, bf16) did that at the
    end of 12 of its 16 blocks; the two 51 MiB copies of its first block's output set the call's peak
    (196 MiB in the plan, 199 measured on an H100, against eager's 186)."""
    graph = gm.graph
    dropped = 0
    for node in list(graph.nodes):
        source = _copied_in_place(node)
        if source is not None:
            replace_node(graph, node, source)
            dropped += 1
    return recompiled_if(gm, dropped)


def _copied_in_place(node):
    """`x` where `node` is `permute(clone(permute(x, TO_NHWC)), TO_NCHW)` (fx_edit.stored_permuted)
    and `x` is stored NHWC already (the clone's input is contiguous): the copy's values, strides
    and layout are `x`'s own. Else None."""
    if not is_permute(node, TO_NCHW):
        return None
    clone = node.args[0]
    if not (isinstance(clone, torch.fx.Node) and clone.op == "call_function" and clone.target is aten.clone.default
            and clone.kwargs.get("memory_format", torch.contiguous_format) == torch.contiguous_format):
        return None
    inner = clone.args[0]
    if not is_permute(inner, TO_NHWC):
        return None
    x = inner.args[0]
    val = meta_val(x)
    if not isinstance(val, torch.Tensor) or any(not isinstance(d, int) for d in (*val.shape, *val.stride())):
        return None
    if val.storage_offset() != 0:
        return None  # a part of a larger storage (a chunk): the copy starts the conv's operand aligned
    return x if val.permute(TO_NHWC).is_contiguous() else None


def _eligible(node, devices: tuple[str, ...]) -> bool:
    if node.op != "call_function" or node.target is not aten.convolution.default or len(node.args) != 9:
        return False
    x, weight, out = meta_val(node.args[0]), meta_val(node.args[1]), meta_val(node)
    if not all(isinstance(t, torch.Tensor) and t.dim() == 4 for t in (x, weight, out)):
        return False
    if out.device.type not in devices or x.dtype not in HALF_TYPES or weight.dtype != x.dtype:
        return False
    if any(not isinstance(s, int) for t in (x, weight) for s in (*t.shape, *t.stride())):
        return False  # symbolic sizes or strides
    if any(u.target is aten.as_strided.default for u in node.users):
        return False  # its strides were computed for the trace's layout (lower_indexing.py reads them)
    if any(u.op == "output" for a in (node, node.args[0]) for u in a.users):
        # A training forward returns the conv's input and result for the backward (saved
        # activations), row-major as traced: the input would be stored twice and the result
        # copied back. ResNet-50's AMP training step ran as many GPU ms with the rewrite and
        # 19% more host time per step (H100, session 33), so such convs are left alone.
        return False
    transposed, groups = node.args[6], node.args[8]
    depthwise = weight.shape[1] == 1
    return not transposed and (groups == 1 or depthwise)


def _channels_last(val) -> bool:
    """Stored NHWC already (a conv's result, a permute of NHWC storage): no copy needed. A tensor
    with one channel or a 1 x 1 image is both layouts at once."""
    return isinstance(val, torch.Tensor) and val.is_contiguous(memory_format=torch.channels_last)


def _output_node(graph: torch.fx.Graph):
    return next(n for n in reversed(graph.nodes) if n.op == "output")


def output_strides(gm: torch.fx.GraphModule) -> dict[int, tuple]:
    """{position in the graph's outputs: the traced strides} of each static-size tensor output,
    taken before the layout passes (`restore_output_strides` after them)."""
    outs = _output_node(gm.graph).args[0]
    strides = {}
    for k, a in enumerate(outs if isinstance(outs, (tuple, list)) else (outs,)):
        val = meta_val(a)
        if isinstance(val, torch.Tensor) and all(isinstance(s, int) for s in val.stride()):
            strides[k] = tuple(val.stride())
    return strides


def restore_output_strides(gm: torch.fx.GraphModule, before: dict[int, tuple]) -> int:
    """Copy each row-major output of the trace (`before`: `output_strides`) that the layout passes
    left in another layout (a conv's channels-last result, or the pointwise chain after it that
    follow_layouts.py kept NHWC, where eager's was NCHW) back to row-major, so callers get eager's
    strides; returns how many. An output the trace itself made in another layout keeps it."""
    graph = gm.graph
    output = _output_node(graph)
    outs = output.args[0]
    items = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    changed = 0
    for k, strides in before.items():
        a = items[k]
        val = meta_val(a)
        if not isinstance(a, torch.fx.Node) or not isinstance(val, torch.Tensor) or tuple(val.stride()) == strides:
            continue
        if not torch.empty_strided(val.shape, strides, device="meta").is_contiguous():
            continue  # a layout of its own in the trace: not one this pass makes
        with graph.inserting_before(output):
            items[k] = call_node(graph, aten.clone.default, (a,), {"memory_format": torch.contiguous_format})
        changed += 1
    if changed:
        output.args = (type(outs)(items) if isinstance(outs, (tuple, list)) else items[0],)
        gm.recompile()
    return changed

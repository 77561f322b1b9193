"""Attention with a mask keeps a fused kernel on the GPU.

`F.scaled_dot_product_attention` picks its kernel when it runs. Under AOTAutograd it runs on
fake tensors, and there torch's choice for a masked call on CUDA is the math path (a real
tensor of the same layout gets cuDNN): two batched products and a softmax, in fp32 for half
types. transformers builds a mask under tracing even when eager would pass none (BERT, ViT...),
so every attention of such a model became fp32 GEMMs, close to half of BERT's GPU time
(docs/performance.md, "Masked attention keeps a fused kernel").

`choose_attention_kernels` rewrites each such call of the Dynamo graph, before AOTAutograd
traces it, to `masked_attention`: on CUDA, for layouts the memory-efficient kernel takes, the
mask becomes the additive bias torch itself would make of it (-inf where a boolean mask is
false) and the call is one library call the capture stage keeps (its backward too):
`aten._scaled_dot_product_cudnn_attention` where cuDNN takes it (half types, a bias that needs no
gradient, torch's own cuDNN checks, and a numerical check of cuDNN with a bias on the device,
once per process), else `aten._scaled_dot_product_efficient_attention`. cuDNN is what eager picks
for such a call on Hopper and is 2.3x faster forward at BERT's shapes (docs/performance.md,
"Masked attention kernels"). Anything else is the call as it was.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from pathlib import Path

import torch

from .fx_edit import drop_dead_code, example_value

# Layouts aten's memory-efficient attention takes: 4-D q/k/v [batch, heads, seq, dim] with
# contiguous last dims, one head dim for q, k and v, a multiple of 8 up to 128 (its fast range)
EFFICIENT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_HEAD_DIM = 128
# the efficient kernel reads the bias rows aligned to this many elements (torch pads them too)
BIAS_ALIGNMENT = 16


def efficient_attention_applies(q, k, v, attn_mask, dropout_p, is_causal, enable_gqa) -> bool:
    if attn_mask is None or dropout_p != 0.0 or enable_gqa or is_causal:
        # torch's own choice is a fused kernel already, it must sample dropout, or the call is
        # one torch refuses (a mask and is_causal): its own error then
        return False
    tensors = (q, k, v)
    if not all(isinstance(t, torch.Tensor) and t.is_cuda and t.dim() == 4 for t in tensors):
        return False
    if not isinstance(attn_mask, torch.Tensor) or attn_mask.dim() > 4 or not attn_mask.is_cuda:
        return False
    if q.dtype not in EFFICIENT_DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        return False
    if attn_mask.dtype != torch.bool and attn_mask.dtype != q.dtype:
        return False
    head = q.shape[-1]
    if not (k.shape[-1] == head and v.shape[-1] == head and head % 8 == 0 and head <= MAX_HEAD_DIM):
        return False
    if q.shape[0] != k.shape[0] or q.shape[1] != k.shape[1] or k.shape[:3] != v.shape[:3]:
        return False
    target = (q.shape[0], q.shape[1], q.shape[2], k.shape[2])
    mask_shape = (1,) * (4 - attn_mask.dim()) + tuple(attn_mask.shape)
    if any(m != 1 and m != t for m, t in zip(mask_shape, target)):
        return False
    return all(t.stride(-1) == 1 for t in tensors)


def attention_bias(attn_mask: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The mask as the additive bias [batch, heads, q_len, k_len] the efficient kernel reads:
    contiguous rows, padded to BIAS_ALIGNMENT and sliced back, as torch's own call prepares it.

    While tracing, made once per mask (kept on the mask's traced tensor, which lives as long as the
    trace) and shared by every call reading that mask: transformers passes one mask to all of a model's layers, and a bias
    per layer was twelve 4 MiB copies in BERT base at 8 x 512, most of them live at once (its
    peak memory 80 MiB against eager's 68)."""
    length = k.shape[2]
    if type(attn_mask) is torch.Tensor:  # a real tensor (the graph run eagerly): its values may change
        return _bias_rows(attn_mask, q, length).expand(q.shape[0], q.shape[1], q.shape[2], length)
    memo = attn_mask.__dict__.setdefault("_pipec_attention_bias", {})
    key = (q.dtype, q.device, str(length))  # str: a symbolic length is a SymInt, not hashable
    rows = memo.get(key)
    if rows is None:
        rows = memo[key] = _bias_rows(attn_mask, q, length)
    return rows.expand(q.shape[0], q.shape[1], q.shape[2], length)


def _bias_rows(attn_mask: torch.Tensor, q: torch.Tensor, length) -> torch.Tensor:
    """The bias as 4-D contiguous rows of `length`, padded to BIAS_ALIGNMENT; dims of size 1
    (the heads, usually) stay to be broadcast by the caller's expand."""
    if attn_mask.dtype == torch.bool:
        zero = torch.zeros((), dtype=q.dtype, device=q.device)
        bias = torch.where(attn_mask, zero, torch.full((), float("-inf"), dtype=q.dtype, device=q.device))
    else:
        bias = attn_mask
    while bias.dim() < 4:
        bias = bias.unsqueeze(0)
    if bias.shape[-1] == 1 and length != 1:  # a mask broadcast along the keys: rows of full length
        bias = bias.expand(*bias.shape[:-1], length)
    # rows contiguous (a mask expanded along its last dim has stride 0 there)
    bias = bias.contiguous()
    if length % BIAS_ALIGNMENT:
        pad = BIAS_ALIGNMENT - length % BIAS_ALIGNMENT
        bias = torch.nn.functional.pad(bias, (0, pad))[..., :length]
    return bias


def masked_attention(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                     enable_gqa=False, *, cudnn_checked=False):
    """F.scaled_dot_product_attention, with a masked CUDA call sent to a fused kernel: cuDNN's where
    `cudnn_checked` (cuDNN with a bias passed its check for this device and dtype) and it takes the
    call, else the memory-efficient kernel."""
    if not efficient_attention_applies(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
        extra = {"enable_gqa": True} if enable_gqa else {}
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, **extra)
    bias = attention_bias(attn_mask, query, key)
    needs_lse = torch.is_grad_enabled() and any(t.requires_grad for t in (query, key, value))
    if cudnn_checked and cudnn_takes(query, key, value, bias, attn_mask):
        out = torch.ops.aten._scaled_dot_product_cudnn_attention.default(
            query, key, value, bias, needs_lse, 0.0, False, False, scale=scale)
        return out[0]
    out = torch.ops.aten._scaled_dot_product_efficient_attention.default(
        query, key, value, bias, needs_lse, 0.0, False, scale=scale)
    return out[0]


# ---------------------------------------------------------------- cuDNN's attention with a bias

CUDNN_DTYPES = (torch.float16, torch.bfloat16)


def cudnn_takes(q, k, v, bias, attn_mask) -> bool:
    """Whether cuDNN's attention takes this call: half types, a bias no gradient flows into (its
    backward computes none), cuDNN attention enabled, and torch's own checks of the layouts
    (`can_use_cudnn_attention`, which reads sizes, strides and dtypes: fake tensors do)."""
    if q.dtype not in CUDNN_DTYPES or attn_mask.requires_grad:
        return False
    if not torch.backends.cuda.cudnn_sdp_enabled():
        return False
    try:
        params = torch.backends.cuda.SDPAParams(q, k, v, bias, 0.0, False, False)
        return bool(torch.backends.cuda.can_use_cudnn_attention(params))
    except Exception:  # noqa: BLE001 - a torch without the check, or a layout it cannot read: not cuDNN
        return False


# whether cuDNN's attention with a bias matched the math on a device and dtype (checked once per process)
_CUDNN_CHECKED: dict[tuple[int, torch.dtype], bool] = {}

# the check's tolerance against fp32 math (bf16 rounding of a softmax-weighted sum of unit values)
CUDNN_CHECK_TOLERANCE = 3e-2
# what the verdicts kept on disk are named by: a new check (or tolerance) makes old verdicts unread
CUDNN_CHECK_VERSION = f"masked-bias-v1-tol{CUDNN_CHECK_TOLERANCE}"
VERDICTS_FILE = "cudnn_attention.json"


def cudnn_attention_checked(device: torch.device, dtype: torch.dtype, verdicts_dir: str | None = None,
                            profile=None) -> bool:
    """Whether cuDNN's attention with a bias runs and matches fp32 math, forward and backward, on a
    small masked call of `dtype` on `device` (the layout masked_attention passes: a bias expanded
    over heads, rows padded to BIAS_ALIGNMENT, the last 9 keys of one sequence masked as padding). The
    answer is kept for the process; a failure warns once and masked calls keep the efficient kernel.

    With `verdicts_dir` (the front end's, beside its compile cache) the answer is also kept on disk,
    named by the GPU, torch, cuDNN and the check's version: the check costs 0.3-0.4 s in every
    process on an H100 (the math reference, cuDNN's plans for its shape), and 2.6 s the first time
    on a machine (cuDNN compiling its kernels); a new process reads the verdict instead.

    `profile` (the front end's compile-time recorder, or None) times the check as its own part,
    `device_checks`: it runs inside torch.compile's backend call, where it would read as AOTAutograd's."""
    if device.type != "cuda" or dtype not in CUDNN_DTYPES:
        return False
    key = (device.index if device.index is not None else torch.cuda.current_device(), dtype)
    if key not in _CUDNN_CHECKED:
        identity = _verdict_identity(key[0], dtype)
        stored = _read_verdicts(verdicts_dir).get(identity)
        if isinstance(stored, dict) and isinstance(stored.get("ok"), bool):
            problem = None if stored["ok"] else str(stored.get("problem") or "failed") + " (a stored verdict)"
        else:
            timed = profile.part("device_checks") if profile is not None else contextlib.nullcontext()
            with torch._subclasses.fake_tensor.unset_fake_temporarily(), timed:
                problem = _cudnn_check_problem(torch.device("cuda", key[0]), dtype)
            _store_verdict(verdicts_dir, identity, problem)
        if problem:
            warnings.warn(f"pipec: cuDNN attention with a mask failed its check on {torch.cuda.get_device_name(key[0])} "
                          f"({dtype}): {problem}; masked attention runs the memory-efficient kernel", stacklevel=2)
        _CUDNN_CHECKED[key] = not problem
    return _CUDNN_CHECKED[key]


def _verdict_identity(index: int, dtype: torch.dtype) -> str:
    """What a verdict holds for: the GPU, torch, cuDNN, the dtype and the check itself."""
    props = torch.cuda.get_device_properties(index)
    return (f"{props.name}|sm{props.major}{props.minor}|torch {torch.__version__}|cudnn {torch.backends.cudnn.version()}"
            f"|{str(dtype).removeprefix('torch.')}|{CUDNN_CHECK_VERSION}")


def _read_verdicts(verdicts_dir: str | None) -> dict:
    """The verdicts kept in `verdicts_dir`; {} where there are none or the file is unreadable
    (the check then runs, and its verdict replaces the file)."""
    if not verdicts_dir:
        return {}
    try:
        data = json.loads((Path(verdicts_dir) / VERDICTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _store_verdict(verdicts_dir: str | None, identity: str, problem: str | None) -> None:
    """Keep a verdict beside those already in `verdicts_dir` (written whole, then renamed: a reader
    sees the old file or the new). Best effort: a directory that cannot be written keeps nothing."""
    if not verdicts_dir:
        return
    with contextlib.suppress(OSError):
        directory = Path(verdicts_dir)
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        verdicts = _read_verdicts(verdicts_dir)
        verdicts[identity] = {"ok": problem is None, "problem": problem}
        fd, tmp = tempfile.mkstemp(prefix=f".{VERDICTS_FILE}.", dir=directory)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(verdicts, f, indent=1, sort_keys=True)
            os.replace(tmp, directory / VERDICTS_FILE)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _cudnn_check_problem(device: torch.device, dtype: torch.dtype) -> str | None:
    """What went wrong running cuDNN's attention with a bias on `device`, or None."""
    gen = torch.Generator(device="cpu").manual_seed(0)
    batch, heads, length, dim = 2, 3, 40, 64
    leaves = [torch.randn(batch, heads, length, dim, generator=gen).to(device, dtype).requires_grad_() for _ in range(3)]
    keep = torch.ones(batch, length, dtype=torch.bool)
    keep[0, -9:] = False
    mask = keep[:, None, None, :].expand(batch, 1, length, length).to(device)
    grad = torch.randn(batch, heads, length, dim, generator=gen).to(device, dtype)
    try:
        with torch.enable_grad():
            bias = _bias_rows(mask, leaves[0], length).expand(batch, heads, length, length)
            if not cudnn_takes(*leaves, bias, mask):
                return "torch's cuDNN checks refuse the layout"
            out = torch.ops.aten._scaled_dot_product_cudnn_attention.default(*leaves, bias, True, 0.0, False, False)[0]
            got = (out, *torch.autograd.grad(out, leaves, grad))
            twins = [t.detach().float().requires_grad_() for t in leaves]
            ref = torch.nn.functional.scaled_dot_product_attention(*twins, attn_mask=mask)
            want = (ref, *torch.autograd.grad(ref, twins, grad.float()))
        torch.cuda.synchronize(device)
    except Exception as e:  # noqa: BLE001 - any failure means: do not use it
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]
    for name, a, b in zip(("output", "dq", "dk", "dv"), got, want):
        error = (a.float() - b).abs().max().item()
        if not error <= CUDNN_CHECK_TOLERANCE * max(1.0, b.abs().max().item()):
            return f"{name} off by {error:.3g}"
    return None


_SDPA_TARGETS = (torch._C._nn.scaled_dot_product_attention, torch.nn.functional.scaled_dot_product_attention)


def choose_attention_kernels(gm: torch.fx.GraphModule, verdicts_dir: str | None = None,
                             profile=None) -> torch.fx.GraphModule:
    """Send every scaled_dot_product_attention call of a Dynamo graph through masked_attention
    (which decides per call, when AOTAutograd traces it), after dropping masks that are
    constants letting every position through; a masked call on a device and dtype where cuDNN's
    attention with a bias passed its check may go to cuDNN (`verdicts_dir`: where the check's
    verdicts are kept, `cudnn_attention_checked`; `profile` times the check). Returns `gm`, changed in place."""
    changed = False
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in _SDPA_TARGETS:
            drop_constant_mask(gm, node)
            node.target = masked_attention
            query = example_value(node.args[0]) if node.args else None
            if _mask_arg(node) is not None and isinstance(query, torch.Tensor) \
                    and cudnn_attention_checked(query.device, query.dtype, verdicts_dir, profile):
                node.kwargs = {**node.kwargs, "cudnn_checked": True}
            changed = True
    if changed:
        drop_dead_code(gm.graph)  # a Dynamo graph: its in-place ops have no users, yet they count
        gm.recompile()
    return gm


def _mask_arg(node: torch.fx.Node):
    """The attn_mask argument of an attention call (None if it has none)."""
    return node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)


# ---------------------------------------------------------------- masks known at compile time

# Ops whose value is not a function of their arguments: never evaluated at compile time
_RANDOM_WORDS = ("rand", "dropout", "bernoulli", "normal", "multinomial", "poisson", "uniform", "exponential")


def drop_constant_mask(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    """transformers builds an attention mask under tracing even where none is needed (no
    padding: eager passes none), from factories and the input's static sizes alone. Such a mask
    is a constant: it is evaluated here once, and one that lets every position through is
    dropped, so torch's own choice (cuDNN, flash) runs the call as in eager; a decoder's causal
    mask becomes is_causal=True, which the flash kernels take. Returns whether the call changed."""
    mask = _mask_arg(node)
    if not isinstance(mask, torch.fx.Node):
        return False
    value = evaluate_constant(gm, mask)
    if value is None or not isinstance(value, torch.Tensor):
        return False
    if value.dtype == torch.bool:
        keep = value
    elif value.is_floating_point() and bool(((value == 0) | (value <= torch.finfo(value.dtype).min)).all()):
        keep = value == 0  # an additive mask: 0 where allowed, -inf or the dtype's least value elsewhere
    else:
        return False  # a bias with other values (T5's positions): not a mask
    if bool(keep.all()):
        _set_mask(node, None, causal=False)
    elif _is_causal_mask(node, keep):
        _set_mask(node, None, causal=True)
    else:
        return False
    return True


def _is_causal_mask(node: torch.fx.Node, keep: torch.Tensor) -> bool:
    """A decoder's mask: query i sees keys 0..i, the same for every batch and head, with as many
    queries as keys (is_causal's meaning in torch); its float form holds -inf or the dtype's
    least value elsewhere, which the softmax makes 0 either way (no row is all masked)."""
    q, k = (_traced_value(a) for a in node.args[:2])
    if not (isinstance(q, torch.Tensor) and isinstance(k, torch.Tensor)) or keep.dim() < 2:
        return False
    length = q.shape[-2]
    if length != k.shape[-2] or keep.shape[-2:] != (length, length) or node.kwargs.get("is_causal"):
        return False
    lower = torch.ones(length, length, dtype=torch.bool, device=keep.device).tril()
    return bool((keep == lower).all())


def _set_mask(node: torch.fx.Node, mask, causal: bool) -> None:
    kwargs = dict(node.kwargs)
    if "attn_mask" in kwargs:
        kwargs["attn_mask"] = mask
    else:
        node.args = (*node.args[:3], mask, *node.args[4:])
    if causal:
        if len(node.args) > 5:
            node.args = (*node.args[:5], True, *node.args[6:])
        else:
            kwargs["is_causal"] = True
    node.kwargs = kwargs


def drop_constant_masks(gm: torch.fx.GraphModule) -> int:
    """`drop_constant_mask` for every `aten.scaled_dot_product_attention` call of a torch.export
    graph (decomposed: the portable op an artifact keeps); returns how many calls changed.
    Under export transformers builds these masks too: an all-true one in ViT and wav2vec2, a
    causal one in GPT-2 and Llama without a padding mask."""
    changed = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.scaled_dot_product_attention.default:
            changed += drop_constant_mask(gm, node)
    if changed:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return changed


def _traced_value(a):
    """The example value of a node: Dynamo's `example_value`, or torch.export's `val`."""
    if not isinstance(a, torch.fx.Node):
        return None
    return a.meta.get("example_value", a.meta.get("val"))


# evaluate a mask only if it is small: a constant beyond this is left as it is
MAX_CONSTANT_ELEMENTS = 1 << 24


def evaluate_constant(gm: torch.fx.GraphModule, target: torch.fx.Node):
    """The value of `target` if it depends on no graph input and no random op (run now, on the
    devices its factories name), else None."""
    needed: list[torch.fx.Node] = []
    seen: set[torch.fx.Node] = set()
    stack = [target]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op not in ("call_function", "call_method", "get_attr"):
            return None  # a graph input (placeholder), a submodule call
        name = getattr(n.target, "__name__", str(n.target)).lower()
        if any(word in name for word in _RANDOM_WORDS):
            return None
        if (getattr(n.target, "__module__", None) or "").startswith("torch._functorch"):
            # a vmap's batch dims (transformers builds some masks under vmap): the nesting level
            # they need is set by nodes no value depends on, and a run that fails halfway leaves
            # functorch's level set, which broke the AOTAutograd trace after it (Jamba)
            return None
        example = _traced_value(n)
        if isinstance(example, torch.Tensor) and example.numel() > MAX_CONSTANT_ELEMENTS:
            return None
        needed.append(n)
        stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    graph = torch.fx.Graph()
    env: dict = {}
    for n in sorted(needed, key=order.__getitem__):
        env[n] = graph.node_copy(n, lambda a: env[a])
    graph.output(env[target])
    try:
        with torch._subclasses.fake_tensor.unset_fake_temporarily(), torch.no_grad():
            return torch.fx.GraphModule(gm, graph)()
    except Exception:  # noqa: BLE001 - what cannot run now is simply not a known constant
        return None

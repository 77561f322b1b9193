"""AOTAutograd glue: the decomposition table and the Dynamo backend factory."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from .aot_cache import cache_scope, cache_supported, cached_compiler, is_output_code
from .attention import choose_attention_kernels
from .checkpoint_rng import unwrap_replayed_draws
from .complex_pairs import complex_as_pairs
from .decompositions import DECOMPOSITIONS, matmul_folded
from .errors import CaptureError
from .foreach import foreach_decompositions
from .graph_logs import graph_logs_when_read
from .joint_cse import joint_graph_cse
from .mask_writes import masked_writes_as_where
from .saved_views import save_view_bases
from .table import LIBRARY_OPS, LOWERINGS, base_name
from .vocab_padding import pad_class_dims

# Ops that pipec lowers itself (better fusion than their decompositions) or runs
# as library externs (attention): kept out of the decomposition table.
KEEP = (
    "aten._softmax.default", "aten.native_layer_norm.default",
    "aten.gelu.default", "aten.silu.default", "aten.addmm.default", "aten.var_mean.correction",
    "aten.var.correction", "aten.clamp.default", "aten.clamp.Tensor", "aten.clamp_min.default",
    "aten.clamp_max.default", "aten.hardtanh.default", "aten.sigmoid.default", "aten.tanh.default",
    "aten.mean.dim", "aten.split.Tensor", "aten.unbind.int", "aten.rsub.Tensor", "aten.rsub.Scalar",
    "aten.baddbmm.default", "aten.full_like.default", "aten.zeros_like.default",
    "aten.ones_like.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.squeeze.default",
    "aten.t.default", "aten.transpose.int", "aten.detach.default", "aten.lift_fresh_copy.default",
    "aten.scaled_dot_product_attention.default",
)


def core_decompositions(*, decompose_attention: bool = False) -> dict:
    """torch's core ATen decompositions minus the ops pipec lowers directly.

    Decompositions that would produce `prims.*` ops are dropped too (pipec lowers
    ATen, not prims). With decompose_attention=False (default) scaled dot product
    attention stays one library extern.
    """
    from torch._decomp import core_aten_decompositions

    table = core_aten_decompositions()
    items = table.items() if hasattr(table, "items") else dict(table).items()
    keep = set(KEEP) | {k for k in LOWERINGS if k not in _DECOMPOSE_ANYWAY}

    def kept(op: str) -> bool:
        if "attention" in op:
            return not decompose_attention
        return op in keep or base_name(op) in LIBRARY_OPS or op in _PRODUCES_PRIMS

    table = {op: fn for op, fn in items if not kept(str(op))}
    table.update(lowered_by_decomposition())
    table.update(DECOMPOSITIONS)
    table.update(foreach_decompositions())  # an optimizer step's ops, one per tensor (foreach.py)
    return table


def export_decompositions(*, decompose_attention: bool = False, weights_require_grad: bool = True) -> dict:
    """The table for torch.export's run_decompositions, lowering like the Dynamo path does.

    Under AOTAutograd (Dynamo) every CompositeImplicitAutograd op absent from the table is
    decomposed by its C++ composite kernel as it is traced: `linear` becomes view + addmm + view,
    `conv2d` becomes `convolution`, `matmul` mm/bmm. run_decompositions does the opposite: it
    PRESERVES every composite op its table leaves out, so `core_decompositions` alone would leave
    `aten.linear` a library call whose bias and activation cannot fuse into the matmul's epilogue.
    So each composite op left out here gets its own composite kernel as its decomposition, except
    scaled dot product attention (decompose_attention=False): Dynamo turns it into the attention
    kernel of the tracing device (`_scaled_dot_product_flash_attention_for_cpu` on the CPU), while
    an exported artifact keeps the portable op, which picks its kernel where it runs; one library
    call either way. The retrace sees no tensor requiring grad, which changes how `matmul` (and
    `linear` on a strided input) decomposes: with `weights_require_grad` (the model's parameters
    do, as in Dynamo's trace) [..., m, k] @ [k, n] folds into one mm as Dynamo's does.
    """
    from torch._export.utils import _collect_all_valid_cia_ops_for_aten_namespace, _get_decomp_for_cia

    table = core_decompositions(decompose_attention=decompose_attention)
    for op in _collect_all_valid_cia_ops_for_aten_namespace():
        if op in table or ("attention" in str(op) and not decompose_attention):
            continue
        table[op] = _get_decomp_for_cia(op)
    if weights_require_grad:
        table[torch.ops.aten.matmul.default] = matmul_folded
    return table


# Core ATen ops (so not in torch's core decomposition table) that pipec lowers through
# torch's own decomposition into ops it generates code for: the norms (forward, training
# and backward) and the softmax backwards are reductions and pointwise math.
DECOMPOSE_CORE = (
    "aten.native_group_norm.default", "aten.native_group_norm_backward.default",
    "aten.native_batch_norm.default", "aten._native_batch_norm_legit.default",
    "aten._native_batch_norm_legit.no_stats", "aten._native_batch_norm_legit_no_training.default",
    "aten.native_batch_norm_backward.default", "aten.native_layer_norm_backward.default",
    "aten._softmax_backward_data.default", "aten._log_softmax_backward_data.default",
    # its parts let the min cut save the logits and two row statistics instead of the fp32 output,
    # and let nll_loss's gather move onto the logits (sink_gathers.py); the lowering stays for
    # graphs traced without this table
    "aten._log_softmax.default",
    # not Core ATen, but what functionalization makes of training batch norm (running stats
    # updated out of place): without it, every BatchNorm in training mode would be an extern
    "aten._native_batch_norm_legit_functional.default",
    # not Core ATen either: grid_sample (deformable attention's sampling in RT-DETR and the other
    # detectors) as gathers of its corner pixels with their weights, which fuse. Autograd takes
    # `grid_sampler_2d_backward` before any decomposition: decompositions.py has its own for it
    "aten.grid_sampler_2d.default",
)


def lowered_by_decomposition() -> dict:
    from torch._decomp import decomposition_table

    ops = [_overload(name) for name in DECOMPOSE_CORE]
    return {op: decomposition_table[op] for op in ops if op is not None and op in decomposition_table}


def _overload(name: str):
    _, packet, overload = name.split(".")
    return getattr(getattr(torch.ops.aten, packet, None), overload, None)


# Lowered ops whose decomposition we still prefer (none today).
_DECOMPOSE_ANYWAY: frozenset[str] = frozenset()

# Core decompositions known to emit prims.* ops.
_PRODUCES_PRIMS = frozenset({
    "aten._to_copy.default", "aten.var_mean.correction", "aten.var.correction",
})


# How AOTAutograd splits a training graph into forward and backward (option `aot_partition`):
# "min_cut" saves what is cheapest to keep and recomputes cheap pointwise values in the backward,
# as Inductor does; "default" saves every value the backward reads. BERT base training on the H200:
# a step's peak memory 3572 -> 2841 MiB (eager 3055), GPU time 11.87 -> 11.58 ms (docs/performance.md,
# "Session 8"). `_log_softmax` stays one op here, so its fp32 output is still saved either way.
PARTITIONS = ("min_cut", "default")


def partition_function(name: str):
    """AOTAutograd's partition function for an `aot_partition` option value."""
    from torch._functorch.partitioners import default_partition

    if name not in PARTITIONS:
        raise ValueError(f"aot_partition must be one of {', '.join(PARTITIONS)}, got {name!r}")
    def partition(joint_module: torch.fx.GraphModule, joint_inputs, **kwargs):
        pairs_inside(joint_module)  # no complex value is saved between the two graphs
        pool_inputs_as_shapes(joint_module)  # a max pool's input is not saved for its backward
        with _replays_through_saved_state():
            if name == "default":
                forward, backward = default_partition(joint_module, joint_inputs, **kwargs)
            else:
                strip_detaches(joint_module)
                forward, backward = _min_cut(joint_module, joint_inputs, **kwargs)
        unwrap_replayed_draws(forward, backward)  # checkpointed attention with no dropout (checkpoint_rng.py)
        save_view_bases(forward, backward)  # no transposed input to copy in the backward (saved_views.py)
        return forward, backward

    return partition


def _replays_through_saved_state():
    """Checkpointed random ops replayed through a saved generator state on every device, as on
    the CPU (`run_and_save_rng_state` / `run_with_rng_state`, which checkpoint_rng.py unwraps
    where nothing is drawn), not through the generator objects that torch passes CUDA graphs as
    inputs (`graphsafe_rng_functionalization`), which no pipec graph can take."""
    import torch._functorch.config as functorch_config

    if not hasattr(functorch_config, "graphsafe_rng_functionalization"):
        return contextlib.nullcontext()
    return functorch_config.patch(graphsafe_rng_functionalization=False)


def _min_cut(joint_module: torch.fx.GraphModule, joint_inputs, **kwargs):
    """torch's min-cut partition, with pipec's CSE in place of torch's, which imports Inductor's
    lowering (joint_cse.py)."""
    import torch._functorch.config as functorch_config
    from torch._functorch.partitioners import min_cut_rematerialization_partition

    if functorch_config.cse:
        joint_module.graph.eliminate_dead_code()
        joint_module.graph = joint_graph_cse(joint_module.graph)
        joint_module.recompile()
    with functorch_config.patch(cse=False):
        return min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)


def pairs_inside(joint_module: torch.fx.GraphModule) -> int:
    """Complex values of a joint graph as (real, imaginary) pairs (complex_pairs.py) before it is
    split: a training graph would otherwise save them for its backward, a complex output of the
    forward graph, which the IR cannot hold. Where the pass does not apply (an FFT, a complex
    input) the joint graph is left as it was, and capture reports the op when it lowers it."""
    try:
        return complex_as_pairs(joint_module)
    except CaptureError:
        return 0


_POOL_BACKWARDS = (torch.ops.aten.max_pool2d_with_indices_backward.default,
                   torch.ops.aten.max_pool3d_with_indices_backward.default)


def pool_inputs_as_shapes(gm: torch.fx.GraphModule) -> int:
    """Give each max-pool backward of a joint graph an unwritten tensor of its input's layout in
    place of the input; returns how many were rewritten.

    The backward scatters each gradient to the point its saved index names: it reads the
    input's sizes and strides, never its values (pipec's lowering, lower_pool_backward.py, as ATen's
    kernels). Passed the input itself, the partition saves it for the backward: ResNet-50's
    stem activation, [32, 64, 112, 112] in bf16, 49 MiB held from the forward to the end of
    the backward, which Inductor does not keep. Sizes that are symbolic are left alone."""
    done = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _POOL_BACKWARDS:
            continue
        x = node.args[1]
        val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or not all(isinstance(d, int) for d in (*val.shape, *val.stride())):
            continue
        with gm.graph.inserting_before(node):
            stand_in = gm.graph.call_function(torch.ops.aten.empty_strided.default,
                                              (list(val.shape), list(val.stride())),
                                              {"dtype": val.dtype, "device": val.device})
        stand_in.meta["val"] = val
        node.update_arg(1, stand_in)
        done += 1
    if done:
        gm.recompile()
    return done


def strip_detaches(gm: torch.fx.GraphModule) -> int:
    """Replace every `aten.detach` of a joint graph by its input; returns how many went.

    Autograd saves a log-softmax's (and softmax's) output for its backward through a detach. In
    a traced joint graph a detach computes nothing, but the min cut counts it as an op that
    cannot fuse, so the value it reads must be materialized in the backward and is saved: the fp32
    log-probabilities of a vocabulary loss (4096 x 30522: 500 MB) instead of the bf16 logits and
    two row statistics it recomputes them from."""
    gone = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is torch.ops.aten.detach.default:
            node.replace_all_uses_with(node.args[0])
            gm.graph.erase_node(node)
            gone += 1
    if gone:
        gm.recompile()
    return gone


def backward_compiled_with_forward(enabled: bool = True):
    """AOTAutograd compiles a backward whose sizes are all static lazily, at the first backward
    call; this has it compiled with the forward instead (as it already is when the backward
    saves sizes). The runtime starts a loaded program's kernel compiles in its worker pool at
    once, so the forward's kernels then compile while the backward is lowered, and the
    backward's while the first forward runs, rather than each in a phase of its own
    (docs/performance.md, "Compiles started at load"). A no-op on a torch without the switch."""
    config = torch._functorch.config
    if not enabled or not hasattr(config, "force_non_lazy_backward_lowering"):
        return contextlib.nullcontext()
    return config.patch(force_non_lazy_backward_lowering=True)


@contextlib.contextmanager
def effect_tokens_inside():
    """An op with effects (`_linalg_check_errors` after torch.linalg.inv) is ordered by a token
    that AOTAutograd threads through `with_effects`. By default the token is a graph input and
    output, handed over as None at run time, which no pipec program can take; unlifted, it is
    made and consumed inside the graph (`prims._make_token` / `_sink_tokens`), which capture
    lowers to nothing (extern_calls.py, `effectful_call`). A no-op on a torch without the switch.

    Torch before 2.12 does not count `_linalg_check_errors` as an effect, so tracing dropped it
    (an op with no output): a compiled `linalg.inv` of a singular matrix returned infinities
    where eager raises, Inductor's included. It is registered as one while pipec traces."""
    config = torch._functorch.config
    with contextlib.ExitStack() as stack:
        if hasattr(config, "unlift_effect_tokens"):
            stack.enter_context(config.patch(unlift_effect_tokens=True))
            stack.enter_context(linalg_checks_kept())  # its token, too, must stay inside the graph
        yield


@contextlib.contextmanager
def linalg_checks_kept():
    """`_linalg_check_errors` as an ordered effect while the block runs, where torch does not
    make it one (before 2.12); then as it was."""
    handle = None
    try:
        from torch._higher_order_ops import effects

        op = torch.ops.aten._linalg_check_errors.default
        if effects._get_effect(op) is None:
            handle = effects._register_effectful_op(op, effects._EffectType.ORDERED)
    except Exception:  # noqa: BLE001, S110 - torch's private API moved: as before (the check may be dropped)
        pass
    try:
        yield
    finally:
        if handle is not None:
            handle.destroy()


def make_dynamo_backend(compile_aten_graph: Callable[[torch.fx.GraphModule, list, str], Callable],
                        *, decompositions: dict | None = None, fused_attention: bool = True,
                        partition: str = "min_cut", pad_classes: bool = True,
                        backward_with_forward: bool = True, cache_tag: str | None = None,
                        verdicts_dir: str | None = None, profile=None):
    """A torch.compile backend: Dynamo -> AOTAutograd (core decompositions) -> compile_aten_graph.

    With `pad_classes` (option `pad_classes`, default on), a classifier trained with cross
    entropy over a class count that is not a multiple of 8 is padded first (vocab_padding.py).
    With `fused_attention`, masked attention on CUDA is sent to a fused kernel first
    (attention.choose_attention_kernels: under AOTAutograd torch would pick its math path).
    `partition` names how training graphs are split (PARTITIONS). With `backward_with_forward`
    (option `early_compile`, default on) a training graph's backward is compiled right after
    its forward, not at the first backward call (`backward_compiled_with_forward`).

    compile_aten_graph(aten_gm, example_inputs, kind) with kind "forward" / "backward" /
    "inference" returns a callable taking ONE list of tensors (the graph's inputs) and
    returning a list/tuple of outputs. Where that callable has `call_owned(list)`, the list
    AOTAutograd hands over goes there, to be cleared and its tensors dropped after their
    last reader (the runtime's owned_inputs.py).

    With `cache_tag` (the front end's name for its code and options), AOTAutograd looks each
    graph up in its own cache first, and stores it where compile_aten_graph returned an
    `OutputCode` that can be pickled (aot_cache.py); where this torch cannot, or the backward
    is compiled lazily (`backward_with_forward` off), nothing changes.

    `verdicts_dir`: where checks of the device's libraries keep their verdicts across processes
    (attention.cudnn_attention_checked); None checks once per process. `profile`: the front end's
    compile-time recorder (or None), which times that check as its own part.
    """
    from torch._dynamo.backends.common import aot_autograd

    # a backward compiled lazily (at its first call) is compiled after the cache's settings are
    # gone, and torch stores no entry for the step: with early_compile off, nothing is cached
    cached = cache_tag is not None and backward_with_forward and cache_supported()

    def compiler(kind: str):
        def compile_fn(gm: torch.fx.GraphModule, example_inputs):
            fn = compile_aten_graph(gm, list(example_inputs), kind)
            if cached and is_output_code(fn):
                return fn  # the front end's OutputCode: AOTAutograd calls it boxed, and may store it
            owned = getattr(fn, "call_owned", None)

            def boxed(args: list[Any]):
                # AOTAutograd hands its list over (boxed call, `steal_args`): a callable that can
                # take it drops each input after its last reader, so a backward frees the
                # activations it has read instead of holding all of them to its end
                if owned is not None and type(args) is list:
                    return owned(args)
                return fn(list(args))

            boxed._boxed_call = True  # AOT passes one list (boxed calling convention)
            return boxed
        compile_fn.__name__ = f"pipec_{kind}_compiler"
        return cached_compiler(compile_fn) if cached else compile_fn

    aot_backend = aot_autograd(
        fw_compiler=compiler("forward"),
        bw_compiler=compiler("backward"),
        inference_compiler=compiler("inference"),
        decompositions=decompositions if decompositions is not None else core_decompositions(),
        partition_fn=partition_function(partition),
        # an inference graph's input mutations (an optimizer step's parameters and state, a static
        # KV cache) stay in the graph as copy_ into the input (Graph.writes), stored by the kernel
        # computing the value, instead of one eager copy_ per input in AOTAutograd's epilogue
        keep_inference_input_mutations=True,
    )
    def backend(gm: torch.fx.GraphModule, example_inputs):
        masked_writes_as_where(gm)  # `x[mask] = v` as a where, no nonzero in its backward (mask_writes.py)
        if pad_classes:  # a cross-entropy head over an unaligned class count (vocab_padding.py)
            pad_class_dims(gm)
        if fused_attention:
            gm = choose_attention_kernels(gm, verdicts_dir, profile)
        with backward_compiled_with_forward(backward_with_forward), graph_logs_when_read(), effect_tokens_inside(), \
                cache_scope(cache_tag) if cached else contextlib.nullcontext():
            return aot_backend(gm, example_inputs)

    return backend

"""Capture through torch.export: a whole model -> (Graph, bindings of its state by name)."""

from __future__ import annotations

import warnings

import torch

from pipec_ir import CompileOptions, Graph

from .aot import export_decompositions
from .attention import drop_constant_masks
from .portable_attention import additive_attention_masks, mark_attention_output_copies
from .errors import CaptureError
from .lowerer import lower_graph


def export_program(model, example_inputs, options: CompileOptions | None = None):
    """torch.export.export (strict first, non-strict as a fallback) + pipec's decompositions, the
    same ops as the Dynamo path's (export_decompositions: composite ops such as linear decomposed)."""
    options = options or CompileOptions()
    if not isinstance(model, torch.nn.Module):
        fn = model

        class _Wrapper(torch.nn.Module):
            def forward(self, *args):
                return fn(*args)
        model = _Wrapper()
    args = tuple(example_inputs)
    name = _model_name(model, options)
    strict = options.get("export_strict", None)
    dynamic_shapes = options.get("export_dynamic_shapes", None)  # torch.export's dynamic_shapes argument
    try:
        ep = torch.export.export(model, args, strict=True if strict is None else bool(strict),
                                 dynamic_shapes=dynamic_shapes)
    except Exception as first:  # noqa: BLE001 - report both attempts if the fallback fails too
        if strict is not None:
            raise CaptureError(f"model {name}, capture export: torch.export.export failed: {first}") from first
        warnings.warn(f"pipec: strict torch.export of {name} failed ({type(first).__name__}: "
                      f"{str(first).splitlines()[0] if str(first) else ''}); retrying with strict=False",
                      stacklevel=2)
        try:
            ep = torch.export.export(model, args, strict=False, dynamic_shapes=dynamic_shapes)
        except Exception as second:  # noqa: BLE001
            raise CaptureError(
                f"model {name}, capture export: torch.export.export failed (strict: {first}; "
                f"non-strict: {second}); use capture='dynamo', which allows graph breaks") from second
    decomp = export_decompositions(decompose_attention=bool(options.get("decompose_attention", False)),
                                   weights_require_grad=any(p.requires_grad for p in model.parameters()))
    return ep.run_decompositions(decomp)


def export_graph(model, example_inputs, options: CompileOptions | None = None) -> tuple[Graph, dict]:
    """Export and lower `model`. Returns (Graph, {input name: tensor} for parameters/buffers/constants).

    Parameters and buffers become graph inputs named by their fully qualified name
    ("fc1.weight") with role "parameter"/"buffer"; user inputs keep their names, role "input".
    """
    options = options or CompileOptions()
    ep = export_program(model, example_inputs, options)
    name = _model_name(model, options)
    drop_constant_masks(ep.graph_module)  # masks from no input: dropped, or is_causal
    mark_attention_output_copies(ep.graph_module)  # copied only where the kernel's layout needs it
    additive_attention_masks(ep.graph_module)  # one bias for every layer, not one per call
    from torch.export.graph_signature import InputKind, OutputKind

    tokens_inside(ep)
    specs: dict[str, tuple[str, str]] = {}
    bindings: dict[str, torch.Tensor] = {}
    state = ep.state_dict
    constants = getattr(ep, "constants", {}) or {}
    for spec in ep.graph_signature.input_specs:
        arg_name = getattr(spec.arg, "name", None)
        if arg_name is None:
            continue
        if spec.kind == InputKind.PARAMETER:
            specs[arg_name] = (spec.target, "parameter")
            bindings[spec.target] = state[spec.target]
        elif spec.kind == InputKind.BUFFER:
            specs[arg_name] = (spec.target, "buffer")
            bindings[spec.target] = state[spec.target] if spec.target in state else constants[spec.target]
        elif spec.kind == InputKind.CONSTANT_TENSOR:
            specs[arg_name] = (spec.target, "buffer")
            bindings[spec.target] = constants[spec.target]
        elif spec.kind not in (InputKind.USER_INPUT, InputKind.TOKEN):
            raise CaptureError(f"model {name}, capture export: unsupported input kind {spec.kind}")
    mutations = [s for s in ep.graph_signature.output_specs if s.kind not in (OutputKind.USER_OUTPUT, OutputKind.TOKEN)]
    if mutations:
        raise CaptureError(
            f"model {name}, capture export: the model updates state in place "
            f"({', '.join(str(s.target) for s in mutations)}); call model.eval() or use capture='dynamo'")
    graph = lower_graph(ep.graph_module, name=_graph_name(options, name), input_specs=specs,
                        fullgraph=options.fullgraph, model_name=name,
                        fallback_random=bool(options.get("fallback_random", False)),
                        conv_channels_last=bool(options.get("conv_channels_last", True)))
    return graph, bindings


def tokens_inside(ep) -> None:
    """The effect tokens of an exported program (the order of `with_effects` calls, e.g.
    torch.linalg.inv's check of its factorization) made inside its graph instead of taken and
    returned: the graph's inputs and outputs are then its data alone, as under AOTAutograd
    (aot.effect_tokens_inside), and capture lowers the tokens to nothing."""
    from torch.export.graph_signature import InputKind, OutputKind

    sig = ep.graph_signature
    token_in = {s.arg.name for s in sig.input_specs if s.kind == InputKind.TOKEN}
    token_out = {s.arg.name for s in sig.output_specs if s.kind == OutputKind.TOKEN}
    if not token_in and not token_out:
        return
    graph = ep.graph_module.graph
    output = next(n for n in graph.nodes if n.op == "output")
    output.args = (tuple(a for a in output.args[0] if getattr(a, "name", None) not in token_out),)
    for node in [n for n in graph.nodes if n.op == "placeholder" and n.name in token_in]:
        with graph.inserting_after(node):
            made = graph.call_function(torch.ops.prims._make_token.default, ())
        made.meta["val"] = node.meta.get("val")
        node.replace_all_uses_with(made)
        graph.erase_node(node)
    ep.graph_module.recompile()


def _model_name(model, options) -> str:
    return options.get("model_name") or type(model).__name__


def _graph_name(options, name) -> str:
    g = options.get("graph_name") or name
    return "".join(c if c.isalnum() or c == "_" else "_" for c in g)

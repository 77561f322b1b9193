"""pipec's built-in capture stages, registered through the `pipec` entry point group."""

from __future__ import annotations

import torch

import pipec_ir
from pipec_ir import CompileOptions, Graph

from .aot import core_decompositions, make_dynamo_backend
from .export import export_graph
from .lowerer import constant_bindings, lower_graph


class DynamoCapture:
    """capture "dynamo": lowers the ATen graphs that Dynamo + AOTAutograd hand to a backend."""

    def __init__(self) -> None:
        # decompose_attention -> the decomposition table: building it walks every ATen operator's
        # registrations (0.1-0.2 s of CPU), once per Dynamo graph before; AOTAutograd copies it
        self._decompositions: dict[bool, dict] = {}

    def capture(self, gm: torch.fx.GraphModule, example_inputs: list, options: CompileOptions) -> Graph:
        name = options.get("graph_name") or "graph"
        return lower_graph(gm, example_inputs, name=name, fullgraph=options.fullgraph,
                           model_name=options.get("model_name"),
                           fallback_random=bool(options.get("fallback_random", False)),
                           conv_channels_last=bool(options.get("conv_channels_last", True)))

    def constants(self, gm: torch.fx.GraphModule, graph: Graph) -> dict[str, torch.Tensor]:
        """{graph input name: value} for the inputs that `capture` made of `gm`'s own tensor
        attributes (`torch.tensor([...])` in a forward, a KV cache's `torch.tensor([])`): the
        caller of the compiled graph does not pass them, so whoever runs it binds these."""
        return constant_bindings(gm, graph)

    def dynamo_backend(self, compile_aten_graph, options: CompileOptions | None = None, profile=None):
        """A torch.compile backend calling compile_aten_graph(aten_gm, example_inputs, kind); `profile`
        (the front end's compile-time recorder, or None) times the capture's device checks."""
        decompose = bool(options.get("decompose_attention", False)) if options is not None else False
        table = self._decompositions.get(decompose)
        if table is None:
            table = self._decompositions[decompose] = core_decompositions(decompose_attention=decompose)
        partition = options.get("aot_partition", "min_cut") if options is not None else "min_cut"
        pad_classes = bool(options.get("pad_classes", True)) if options is not None else True
        early = bool(options.get("early_compile", True)) if options is not None else True
        tag = options.get("aot_cache_tag") if options is not None else None  # set by the front end
        verdicts = options.get("device_checks_dir") if options is not None else None  # set by the front end
        return make_dynamo_backend(compile_aten_graph, decompositions=table, fused_attention=not decompose,
                                   partition=partition, pad_classes=pad_classes, backward_with_forward=early,
                                   cache_tag=tag, verdicts_dir=verdicts, profile=profile)


class ExportCapture:
    """capture "export": torch.export.export of a whole model, then lowering."""

    def capture(self, model, example_inputs: list, options: CompileOptions) -> Graph:
        return export_graph(model, example_inputs, options)[0]

    def export_with_bindings(self, model, example_inputs: list, options: CompileOptions):
        """(Graph, {name: tensor}) - the values of the parameter/buffer inputs."""
        return export_graph(model, example_inputs, options)


@pipec_ir.hookimpl
def pipec_register(registry) -> None:
    registry.add_capture("dynamo", DynamoCapture())
    registry.add_capture("export", ExportCapture())

"""A compiled graph as AOTAutograd's cache holds it (aot_cache.py tells the whole story).

Its own module because it subclasses Inductor's OutputCode: importing that imports Dynamo and
Inductor, which a process that only loads an artifact never does. The backend imports it
when a graph reaches it; AOTAutograd's cache imports it by name when it loads an entry.
"""

from __future__ import annotations

from collections.abc import Callable

from torch._inductor.output_code import OutputCode

from .aot_cache import current_loader, pickle_layers


class CompiledGraph(OutputCode):
    """One compiled ATen graph as AOTAutograd holds it: `fn` (the layers around the runtime's
    callable) while loaded; the Program's JSON, the pickled layers and the graph's counts for
    its cache entry."""

    def __init__(self, fn: Callable, kind: str, program_text: str | None, stats: dict) -> None:
        self.fn = fn
        self.kind = kind
        self.program_text = program_text
        self.stats = stats
        self.layers: bytes | None = None
        self._boxed_call = True

    def __call__(self, args):
        # AOTAutograd hands its list over (boxed call, `steal_args`): a callable that can take it
        # drops each input after its last reader (the runtime's owned_inputs.py)
        owned = getattr(self.fn, "call_owned", None)
        if owned is not None and type(args) is list:
            return owned(args)
        return self.fn(list(args))

    def prepare_for_serialization(self) -> None:
        """Called on a copy about to be pickled: the layers pickled without the runtime."""
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        if self.program_text is None or self.fn is None:  # (copied with `copy`, which keeps `fn`)
            raise BypassAOTAutogradCache("pipec: the graph has no Program to store")
        try:
            self.layers = pickle_layers(self.fn)
        except Exception as exc:  # noqa: BLE001 - any object that does not pickle keeps the graph out
            raise BypassAOTAutogradCache(f"pipec: the graph's call layers cannot be pickled: "
                                         f"{type(exc).__name__}: {exc}") from exc
        self.fn = None

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        """Load the graph again on a cache hit, through the backend compiling now."""
        if self.fn is not None:
            return
        loader = current_loader()
        if loader is None:
            raise RuntimeError("pipec: a graph from AOTAutograd's cache was loaded outside pipec's backend")
        self.fn = loader(self)

    def set_triton_bundle(self, triton_bundle) -> None:
        pass  # the runtime keeps Triton's compiled kernels in its own kernel directory


__all__ = ["CompiledGraph"]

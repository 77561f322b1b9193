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

    def __init__(self, fn: Callable, kind: str, program_text: str, stats: dict) -> None:
        self.kind = kind
        self.program_text = program_text
        self.stats = stats
        self.layers: bytes | None = None
        self._boxed_call = True
        self._use(fn)

    def _use(self, fn: Callable | None) -> None:
        self.fn = fn
        # where the callable can take AOTAutograd's list over (boxed call, `steal_args`), each input
        # is dropped after its last reader (the runtime's owned_inputs.py)
        self._owned = getattr(fn, "call_owned", None) if fn is not None else None

    def __call__(self, args):
        if self._owned is not None and type(args) is list:
            return self._owned(args)
        return self.fn(list(args))

    def prepare_for_serialization(self) -> None:
        """Called on a shallow copy about to be pickled (the live graph keeps its callable): the
        layers pickled without the runtime's callable, and the callable dropped."""
        from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

        if self.fn is None:
            raise BypassAOTAutogradCache("pipec: the graph has no callable to store")
        try:
            self.layers = pickle_layers(self.fn)
        except Exception as exc:  # noqa: BLE001 - any object that does not pickle keeps the graph out
            raise BypassAOTAutogradCache(f"pipec: the graph's call layers cannot be pickled: "
                                         f"{type(exc).__name__}: {exc}") from exc
        self._use(None)

    def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
        """Load the graph again on a cache hit, through the backend compiling now. A graph that
        cannot be loaded is a miss to torch (FXGraphCacheMiss): it compiles the graph and
        overwrites the entry, where any other error would keep the broken entry for good."""
        from torch._functorch._aot_autograd.autograd_cache import FXGraphCacheMiss

        if self.fn is not None:
            return
        loader = current_loader()
        if loader is None:
            raise FXGraphCacheMiss("pipec: a graph from AOTAutograd's cache reached no pipec backend")
        try:
            self._use(loader(self))
        except Exception as exc:
            raise FXGraphCacheMiss(f"pipec: {type(exc).__name__}: {exc}") from exc

    def set_triton_bundle(self, triton_bundle) -> None:
        pass  # the runtime keeps Triton's compiled kernels in its own kernel directory


__all__ = ["CompiledGraph"]

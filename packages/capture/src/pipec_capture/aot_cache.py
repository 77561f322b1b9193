"""AOTAutograd's own cache (AOTAutogradCache) for the graphs a front end compiles.

On a warm start AOTAutograd's trace of a training step (functionalization, the joint graph,
the partition) is most of what is left to do once pipec's own stages hit their cache: BERT
base's in a new process took 5.7 s of 10.5 (docs/performance.md, "Session 22"). torch skips
it when its cache holds the step, but only for compilers it knows how to store:

* each compiler wrapped in `SerializableAOTDispatchCompiler`, returning an `OutputCode` that
  can drop what it loaded before it is pickled and load it again after (the front end's; a
  callable that is not one is wrapped in an `UncachedGraph`, which keeps its graph out);
* `functorch.config.bundled_autograd_cache`, so the entry holds the OutputCodes themselves;
* `torch.compiler.config.cache_key_tag`: the entry's key covers the Dynamo graph, its inputs'
  metadata and torch's configuration, but not the decompositions, the partition function or
  the compiler; the front end's tag names them (pipec's code and options);
* pipec's attention function (attention.py) marked cacheable: a Dynamo graph calling a function
  torch does not know is never stored;
* the key made without registering Inductor's code generators (`key_without_inductor_backends`):
  torch registers them to read the custom passes of each device into the key, which imported
  all of Inductor's codegen, 1.3 s of a warm start on this CPU, for a compiler that uses none of it.

Private torch API, present in torch 2.11 and 2.13; on a torch without it nothing is cached.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

import torch

ATTENTION_FUNCTION = "pipec_capture.attention.masked_attention"


def _output_code_class():
    try:
        from torch._inductor.output_code import OutputCode
    except ImportError:
        return None
    return OutputCode


def cache_supported() -> bool:
    """Whether this torch has what AOTAutograd's cache needs from a backend."""
    try:
        from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler  # noqa: F401
    except ImportError:
        return False
    config = torch._functorch.config
    return _output_code_class() is not None and hasattr(config, "bundled_autograd_cache") \
        and hasattr(torch.compiler.config, "cache_key_tag") and hasattr(config, "force_non_lazy_backward_lowering")


def is_output_code(obj) -> bool:
    base = _output_code_class()
    return base is not None and isinstance(obj, base)


def cached_compiler(compile_fn: Callable) -> Callable:
    """`compile_fn(gm, example_inputs)` as a compiler AOTAutograd looks up in its cache first; a
    result that is not an OutputCode goes back as an `UncachedGraph`."""
    from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler

    def compile_output_code(gm, example_inputs):
        out = compile_fn(gm, example_inputs)
        return out if is_output_code(out) else uncached_graph_class()(out)

    compile_output_code.__name__ = getattr(compile_fn, "__name__", "compiler")
    return SerializableAOTDispatchCompiler(_output_code_class(), compile_output_code)


@contextlib.contextmanager
def cache_scope(tag: str):
    """The settings under which AOTAutograd looks the graph up and stores it (module docstring);
    a tag the user set (TORCH_COMPILE_CACHE_KEY_TAG) is kept, with the front end's after it."""
    marked = dict(torch._inductor.config.unsafe_marked_cacheable_functions)
    marked[ATTENTION_FUNCTION] = tag
    user = torch.compiler.config.cache_key_tag
    with torch._functorch.config.patch(bundled_autograd_cache=True), \
            torch.compiler.config.patch(cache_key_tag=f"{user}|{tag}" if user else tag), \
            torch._inductor.config.patch(unsafe_marked_cacheable_functions=marked), \
            key_without_inductor_backends():
        yield


class _RegisteredPasses:
    """What the cache key reads of torch's per-device custom passes (`values()`), less the empty
    entries that registering Inductor's own code generators adds: a key is then the same whether
    or not Inductor ran in the process before."""

    def __init__(self, passes: dict) -> None:
        self._passes = passes

    def values(self) -> list:
        return [p for p in self._passes.values() if p is not None]


def _no_registration() -> None:
    """Stands in for Inductor's backend registration while a key is made (see below)."""


@contextlib.contextmanager
def key_without_inductor_backends():
    """AOTAutograd's cache key (Inductor's `FxGraphHashDetails`) registers every Inductor code
    generator first, only to read each device's custom passes (`custom_backend_passes`): that
    imports Inductor's codegen, its C++, Triton, Halide and Pallas backends and templates, which
    took 1.29 of a BERT training step's warm start on this 2-core CPU (docs/performance.md,
    "Session 24"). pipec compiles with none of them. Here the key is made without that
    registration, from the passes registered for real (by a user, or an out-of-tree device);
    registration adds none. Where torch's layout differs (another version), nothing changes."""
    try:
        from torch._inductor import codecache
    except ImportError:
        codecache = None
    passes = getattr(codecache, "custom_backend_passes", None)
    if not isinstance(passes, dict) or not callable(getattr(codecache, "init_backend_registration", None)):
        yield
        return
    register = codecache.init_backend_registration
    codecache.init_backend_registration, codecache.custom_backend_passes = _no_registration, _RegisteredPasses(passes)
    try:
        yield
    finally:
        codecache.init_backend_registration, codecache.custom_backend_passes = register, passes


@functools.cache
def uncached_graph_class() -> type:
    """`UncachedGraph`, made at first use: it subclasses Inductor's OutputCode, whose import
    brings in Dynamo and Inductor (never pickled, so it needs no importable name)."""
    from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache

    class UncachedGraph(_output_code_class()):
        """A compiled graph AOTAutograd runs but does not store (its callable cannot be pickled)."""

        def __init__(self, fn: Callable[[list], Any]) -> None:
            self.fn = fn
            self._boxed_call = True

        def __call__(self, inputs):
            return self.fn(inputs)

        def prepare_for_serialization(self) -> None:
            raise BypassAOTAutogradCache("pipec: this graph's compiled callable cannot be stored")

        def post_compile(self, example_inputs, constants, graph_kwargs) -> None:
            pass

        def set_triton_bundle(self, triton_bundle) -> None:
            pass

    return UncachedGraph


__all__ = ["ATTENTION_FUNCTION", "cache_scope", "cache_supported", "cached_compiler", "is_output_code",
           "key_without_inductor_backends", "uncached_graph_class"]

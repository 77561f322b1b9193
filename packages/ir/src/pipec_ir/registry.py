"""Registry: named stage implementations, filled by `pipec_register` hooks."""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass, replace

from .protocols import Cache, Capture, Codegen, Fusion, Runtime

STAGES = ("capture", "fusion", "codegen", "runtime", "cache")
_PROTOCOLS = {"capture": Capture, "fusion": Fusion, "codegen": Codegen, "runtime": Runtime, "cache": Cache}


class UnknownStageError(LookupError):
    """No implementation of that name is registered; the message lists the known ones."""


@dataclass(frozen=True)
class Entry:
    """One registered stage implementation, as `pipec plugins` lists it.

    `distribution` and `version` name who registered it ("pipec-fusion", a plugin's
    distribution; "unknown" for code that is not installed). `wrapped_by` names the plugins
    that wrapped it with `Registry.wrap`, innermost first; `impl` is then the outermost wrapper.
    """

    stage: str
    name: str
    impl: object
    distribution: str
    version: str
    wrapped_by: tuple[str, ...] = ()


class Registry:
    """The stage implementations pipec can use, by stage and name.

    The plugin loader (`pipec.plugins`) makes one per process and hands it to every
    plugin's `pipec_register`, then to every `pipec_configure` (pipec_ir.hookspecs). Stages:
    "capture", "fusion", "codegen", "runtime", "cache"; each `add_*` checks that the object
    has the methods of that stage's Protocol (pipec_ir.protocols) and raises TypeError if not.
    Adding a name that exists replaces it. `CompileOptions.<stage>` picks an entry by name;
    `get` / `entry` raise `UnknownStageError` listing the registered names.
    """

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        # The plugin whose hook is running, set by the plugin loader; `wrap` records it.
        self.current_plugin: str | None = None

    def _add(self, stage: str, name: str, impl: object) -> None:
        _check_protocol(stage, name, impl)
        dist, version = distribution_of(type(impl).__module__)
        self._entries[(stage, name)] = Entry(stage, name, impl, dist, version)

    def add_capture(self, name: str, impl: Capture) -> None:
        """Register capture `name` (`capture(gm, example_inputs, options) -> Graph`)."""
        self._add("capture", name, impl)

    def add_fusion(self, name: str, impl: Fusion) -> None:
        """Register fusion policy `name` (`fuse(graph, options) -> KernelPlan`)."""
        self._add("fusion", name, impl)

    def add_codegen(self, name: str, impl: Codegen) -> None:
        """Register code generator `name` (`generate(plan, options) -> Program`)."""
        self._add("codegen", name, impl)

    def add_runtime(self, name: str, impl: Runtime) -> None:
        """Register runtime `name` (`load(program, options) -> callable`)."""
        self._add("runtime", name, impl)

    def add_cache(self, name: str, impl: Cache) -> None:
        """Register cache backend `name` (docs/plugins.md, "Cache backends")."""
        self._add("cache", name, impl)

    def wrap(self, stage: str, name: str, wrapper: Callable[[object], object]) -> object:
        """Replace the implementation of `stage` `name` with `wrapper(current implementation)`.

        For `pipec_configure` hooks, once everything is registered: a wrapper can observe
        or adjust a stage while delegating to the one it wraps. The entry keeps its name,
        distribution and version and records the wrapping plugin in `wrapped_by`; the new
        object must provide the stage's Protocol (TypeError otherwise). Raises
        UnknownStageError when nothing of that name is registered. Returns the new object.
        """
        entry = self.entry(stage, name)
        impl = wrapper(entry.impl)
        _check_protocol(stage, name, impl)
        by = self.current_plugin or distribution_of(type(impl).__module__)[0]
        self._entries[(stage, name)] = replace(entry, impl=impl, wrapped_by=entry.wrapped_by + (by,))
        return impl

    def credit(self, stage: str, name: str, distribution: str, version: str) -> None:
        """Name the distribution that registered an implementation (the plugin loader knows it)."""
        entry = self.entry(stage, name)
        self._entries[(stage, name)] = replace(entry, distribution=distribution, version=version)

    def entry(self, stage: str, name: str) -> Entry:
        """The `Entry` of `stage` `name`; UnknownStageError (listing the known names) if none."""
        try:
            return self._entries[(stage, name)]
        except KeyError:
            known = ", ".join(sorted(self.names(stage))) or "none"
            raise UnknownStageError(f"unknown {stage} {name!r} (registered: {known})") from None

    def get(self, stage: str, name: str):
        """The implementation object of `stage` `name` (see `entry`)."""
        return self.entry(stage, name).impl

    def names(self, stage: str) -> list[str]:
        """The registered names of `stage`, in registration order."""
        return [n for (s, n) in self._entries if s == stage]

    def entries(self) -> list[Entry]:
        """Every entry, by stage (pipeline order) then name."""
        return sorted(self._entries.values(), key=lambda e: (STAGES.index(e.stage), e.name))

    def snapshot(self) -> dict[tuple[str, str], Entry]:
        """The entries as they are now, for `restore` (the loader undoes a hook that raised)."""
        return dict(self._entries)

    def restore(self, snapshot: dict[tuple[str, str], Entry]) -> None:
        """Put back the entries of an earlier `snapshot`."""
        self._entries = dict(snapshot)


def _check_protocol(stage: str, name: str, impl: object) -> None:
    if stage not in _PROTOCOLS:
        raise ValueError(f"unknown stage {stage!r} (stages: {', '.join(STAGES)})")
    if not isinstance(impl, _PROTOCOLS[stage]):
        raise TypeError(f"{stage} implementation {name!r} does not provide the {stage} protocol")


@functools.cache
def _module_distributions() -> dict[str, list[str]]:
    return importlib.metadata.packages_distributions()


def distribution_of(module: str) -> tuple[str, str]:
    """(distribution name, version) that ships `module`, or ("unknown", "0") for code not installed."""
    top = module.split(".")[0]
    try:  # a distribution named like its top-level package (pipec_capture: pipec-capture) is
        # found directly; the full map of every installed distribution takes seconds to build
        found = importlib.metadata.distribution(top)
        if top in (found.read_text("top_level.txt") or top).split():
            return found.metadata["Name"], found.version
    except importlib.metadata.PackageNotFoundError:
        pass
    for dist in _module_distributions().get(top, []):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown", "0"

"""Registry: named stage implementations, filled by `pipec_register` hooks."""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import dataclass

from .protocols import Cache, Capture, Codegen, Fusion, Runtime

STAGES = ("capture", "fusion", "codegen", "runtime", "cache")
_PROTOCOLS = {"capture": Capture, "fusion": Fusion, "codegen": Codegen, "runtime": Runtime, "cache": Cache}


class UnknownStageError(LookupError):
    """No implementation of that name is registered; the message lists the known ones."""


@dataclass(frozen=True)
class Entry:
    stage: str
    name: str
    impl: object
    distribution: str  # who registered it ("pipec-fusion", a plugin's distribution, ...)
    version: str


class Registry:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}

    def _add(self, stage: str, name: str, impl: object) -> None:
        if not isinstance(impl, _PROTOCOLS[stage]):
            raise TypeError(f"{stage} implementation {name!r} does not provide the {stage} protocol")
        dist, version = distribution_of(type(impl).__module__)
        self._entries[(stage, name)] = Entry(stage, name, impl, dist, version)

    def add_capture(self, name: str, impl: Capture) -> None:
        self._add("capture", name, impl)

    def add_fusion(self, name: str, impl: Fusion) -> None:
        self._add("fusion", name, impl)

    def add_codegen(self, name: str, impl: Codegen) -> None:
        self._add("codegen", name, impl)

    def add_runtime(self, name: str, impl: Runtime) -> None:
        self._add("runtime", name, impl)

    def add_cache(self, name: str, impl: Cache) -> None:
        self._add("cache", name, impl)

    def credit(self, stage: str, name: str, distribution: str, version: str) -> None:
        """Name the distribution that registered an implementation (the plugin loader knows it)."""
        entry = self.entry(stage, name)
        self._entries[(stage, name)] = Entry(stage, name, entry.impl, distribution, version)

    def entry(self, stage: str, name: str) -> Entry:
        try:
            return self._entries[(stage, name)]
        except KeyError:
            known = ", ".join(sorted(self.names(stage))) or "none"
            raise UnknownStageError(f"unknown {stage} {name!r} (registered: {known})") from None

    def get(self, stage: str, name: str):
        return self.entry(stage, name).impl

    def names(self, stage: str) -> list[str]:
        return [n for (s, n) in self._entries if s == stage]

    def entries(self) -> list[Entry]:
        return sorted(self._entries.values(), key=lambda e: (STAGES.index(e.stage), e.name))


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

"""CompileOptions: every knob of one compilation, as one frozen value (no global config).

Only values: what may enter a cache key. A model's live state (recompile budget, compile
profile, kernel directory, tuning memos) reaches the runtime in a `LoadContext`."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace


@dataclass(frozen=True)
class CompileOptions:
    capture: str = "dynamo"
    fusion: str = "default"
    codegen: str = "triton"
    runtime: str = "launch"
    dynamic: bool | None = None
    fullgraph: bool = False
    cache: str | None = None
    autotune: bool = True
    dump_dir: str | None = None
    extra: tuple[tuple[str, object], ...] = field(default_factory=tuple)

    def get(self, key: str, default=None):
        """A plugin option from `extra`."""
        for k, v in self.extra:
            if k == key:
                return v
        return default

    def with_extra(self, **kwargs) -> CompileOptions:
        merged = dict(self.extra)
        merged.update(kwargs)
        return replace(self, extra=tuple(sorted(merged.items())))

    def without(self, *keys: str) -> CompileOptions:
        """These options with the `extra` entries named `keys` removed."""
        return replace(self, extra=tuple((k, v) for k, v in self.extra if k not in keys))

    def key(self, exclude: Iterable[str] = ()) -> str:
        """A stable string of the options that can change a stage's output (for cache keys).

        `exclude`: `extra` options that cannot, left out so that changing them does not miss
        the compile cache. The front end passes the chosen runtime's `load_options` (options
        the runtime reads only when it loads a Program: a new recompile limit or size-bucket
        policy must not recompile). Live state (a recompile budget, a compile profile) is never
        an option: it travels in a `LoadContext`."""
        exclude = frozenset(exclude)
        extra = tuple((k, repr(v)) for k, v in self.extra if k not in exclude)
        fields = (self.capture, self.fusion, self.codegen, self.runtime, self.dynamic,
                  self.fullgraph, self.autotune, extra)
        return repr(fields)

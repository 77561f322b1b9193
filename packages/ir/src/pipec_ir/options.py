"""CompileOptions: every knob of one compilation, as one frozen value (no global config)."""

from __future__ import annotations

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

    def key(self) -> str:
        """A stable string of the options that can change a stage's output (for cache keys)."""
        fields = (self.capture, self.fusion, self.codegen, self.runtime, self.dynamic,
                  self.fullgraph, self.autotune, tuple((k, repr(v)) for k, v in self.extra))
        return repr(fields)

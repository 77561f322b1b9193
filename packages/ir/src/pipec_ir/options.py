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
        """A stable string of the options that can change a stage's output (for cache keys).

        Options only the runtime reads (RUNTIME_ONLY_EXTRAS) are left out: a new recompile
        limit or size-bucket policy must not miss the compile cache."""
        extra = tuple((k, repr(v)) for k, v in self.extra if k not in RUNTIME_ONLY_EXTRAS)
        fields = (self.capture, self.fusion, self.codegen, self.runtime, self.dynamic,
                  self.fullgraph, self.autotune, extra)
        return repr(fields)


# `extra` options that the built-in runtimes read and no compile stage does (README: dynamic
# shapes, autotuning; the GEMM choice). A plugin's own options always enter the key.
RUNTIME_ONLY_EXTRAS = frozenset({
    "recompile_limit", "recompile_budget", "bucket", "choice", "tuning_cache", "autotune_configs",
    "kernel_dir", "specialize", "compile_profile",
})

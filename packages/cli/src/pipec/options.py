"""CompileOptions from pipec.compile's keywords, with unknown stage names refused at once.

Its own module because both the public API (`api.py`) and the torch.compile backend
(`backend.py`, `backend="pipec"`) build options, and the API imports the backend.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pipec_ir
from pipec_ir import BUCKET_POLICIES, DEFAULT_RECOMPILE_LIMIT, CompileOptions

from .modes import MODES, mode_options
from .plugins import get_registry

BOUNDS_CHECK_ENV = "PIPEC_BOUNDS_CHECK"  # set (not 0): bounds_check=True unless a compile says otherwise
# options off by default that the environment can turn on for a whole process
OPT_IN_ENVS = {"bounds_check": BOUNDS_CHECK_ENV}
TUNING_TABLE_ENV = "PIPEC_TUNING_TABLE"  # 0: tuning_table=False (time every decision) unless a compile says otherwise
STATIC_LAUNCH_ENV = "PIPEC_STATIC_LAUNCH"  # 0: static_launch=False (Triton's own launcher) unless a compile says otherwise
EARLY_COMPILE_ENV = "PIPEC_EARLY_COMPILE"  # 0: early_compile=False (kernels compiled at the first call, not at load)
AOT_CACHE_ENV = "PIPEC_AOT_CACHE"  # 0: aot_cache=False (AOTAutograd's cache does not hold pipec's graphs)
LAUNCH_STORE_ENV = "PIPEC_LAUNCH_STORE"  # 0: launch_store=False (every kernel through Triton, warm or not)
CONV_CHANNELS_LAST_ENV = "PIPEC_CONV_CHANNELS_LAST"  # 0: conv_channels_last=False (convs on NCHW operands)
TILED_TRANSPOSES_ENV = "PIPEC_TILED_TRANSPOSES"  # 0: tiled_transposes=False (transposing kernels written flat)
PDL_ENV = "PIPEC_PDL"  # 0: pdl=False (no programmatic dependent launch between a CUDA Graph's kernels)
# options on by default that the environment can turn off for a whole process (A/B runs in benchmarks:
# tuning_table=False times every decision, before and after)
SWITCH_ENVS = {"tuning_table": TUNING_TABLE_ENV, "static_launch": STATIC_LAUNCH_ENV,
               "early_compile": EARLY_COMPILE_ENV, "aot_cache": AOT_CACHE_ENV, "launch_store": LAUNCH_STORE_ENV,
               "conv_channels_last": CONV_CHANNELS_LAST_ENV, "tiled_transposes": TILED_TRANSPOSES_ENV,
               "pdl": PDL_ENV}
_OPTION_FIELDS = {f.name for f in dataclasses.fields(CompileOptions)} - {"extra"}


def make_options(*, mode: str = "default", fusion: str = "default", runtime: str | None = None,
                 dynamic: bool | None = None, fullgraph: bool = False, **options: Any) -> CompileOptions:
    """CompileOptions from pipec.compile's keywords; unknown stage names raise ValueError at once."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r} (expected one of: {', '.join(MODES)})")
    options = mode_options(mode, options)  # max-autotune: exhaustive tuning (modes.py)
    if dynamic not in (None, True, False):
        raise ValueError(f"dynamic must be None, True or False, got {dynamic!r}")
    bucket = options.get("bucket", "pow2")
    if bucket not in BUCKET_POLICIES:
        raise ValueError(f"unknown bucket policy {bucket!r} (expected one of: {', '.join(BUCKET_POLICIES)})")
    limit = options.get("recompile_limit", DEFAULT_RECOMPILE_LIMIT)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
        raise ValueError(f"recompile_limit must be a non-negative integer, got {limit!r}")
    workers = options.get("compile_workers")
    if workers is not None and (not isinstance(workers, int) or isinstance(workers, bool) or workers < 0):
        raise ValueError(f"compile_workers must be a non-negative integer (0: compile Triton kernels in "
                         f"this process), got {workers!r}")
    for name, env in OPT_IN_ENVS.items():  # e.g. every compile of this process bounds-checked (gpu_sanitize.sh)
        if name not in options and os.environ.get(env, "0") not in ("", "0"):
            options[name] = True
        if not isinstance(options.get(name, False), bool):
            raise ValueError(f"{name} must be True or False, got {options[name]!r}")
    for name, env in SWITCH_ENVS.items():  # 0 in the environment: off, unless a compile says otherwise
        if name not in options and os.environ.get(env, "1") == "0":
            options[name] = False
        if not isinstance(options.get(name, True), bool):
            raise ValueError(f"{name} must be True or False, got {options[name]!r}")
    fields = {k: options.pop(k) for k in list(options) if k in _OPTION_FIELDS}
    opts = CompileOptions(fusion=fusion, runtime=runtime or MODES[mode], dynamic=dynamic,
                          fullgraph=fullgraph, **fields)
    if options:
        opts = opts.with_extra(**options)
    check_stage_names(opts)
    return opts


def check_stage_names(opts: CompileOptions) -> None:
    """ValueError unless every stage named in `opts` is registered (cache "none": no cache)."""
    registry = get_registry()
    for stage in ("capture", "fusion", "codegen", "runtime", "cache"):
        name = getattr(opts, stage)
        if name is None or (stage == "cache" and name == "none"):  # cache="none": no compile cache
            continue
        try:
            registry.entry(stage, name)
        except pipec_ir.UnknownStageError as exc:
            raise ValueError(str(exc)) from None


def parse_option(text: str) -> tuple[str, Any]:
    """`KEY=VALUE` (`pipec bench --option`, the benchmarks' `--pipec-option`) -> (key, value):
    true/false as booleans, then an int, a float, else the string. ValueError without `=`; an
    unknown or ill-typed option is for `make_options` and the stages to refuse."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ValueError(f"wants KEY=VALUE, got {text!r}")
    if value.lower() in ("true", "false"):
        return key, value.lower() == "true"
    for cast in (int, float):
        try:
            return key, cast(value)
        except ValueError:
            pass
    return key, value


__all__ = ["BOUNDS_CHECK_ENV", "check_stage_names", "make_options", "parse_option"]


"""The tables `pipec bench` prints: one row per backend, and pipec's compile-time profiles
(the result they show is pipec.bench's BenchResult)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import bench_measure

if TYPE_CHECKING:
    from .bench import BenchResult


def _fmt(value: float | int | None, spec: str, suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


def bench_table(result: BenchResult):
    """A rich Table: one row per backend."""
    from rich.table import Table

    where = result.device_name + (" (pipec kernels in Triton's interpreter)" if result.interpreter else "")
    table = Table(title=f"pipec bench · {result.model} · {where}\n{result.timer} · inputs "
                        f"{', '.join(result.inputs) or 'none'}", title_justify="left")
    table.add_column("backend", no_wrap=True)
    table.add_column("ms", justify="right")
    table.add_column("×eager", justify="right")
    table.add_column("×Inductor", justify="right")
    table.add_column("TB/s" + (" (% copy)" if result.copy_tb_per_s else ""), justify="right", no_wrap=True)
    if result.flops:
        table.add_column("TFLOP/s", justify="right")
    table.add_column("kernels", justify="right", no_wrap=True)
    table.add_column("launches", justify="right")
    memory = any(b.peak_mib is not None for b in result.backends)
    if memory:
        table.add_column("peak MiB", justify="right")
        table.add_column("held MiB", justify="right")
    table.add_column("compile cold s", justify="right")
    table.add_column("warm s", justify="right")
    table.add_column("max err", justify="right")
    for b in result.backends:
        d = result.derived(b)
        tbps = _fmt(d["tb_per_s"], ".3g") + (f" ({d['fraction_of_copy']:.0%})" if d["fraction_of_copy"] else "")
        kernels = _fmt(b.kernels, "d") + (f" +{b.extern_ops} extern" if b.extern_ops else "")
        spread = b.rounds_spread is not None and b.rounds_spread > bench_measure.ROUNDS_SPREAD_LIMIT
        ms = _fmt(b.ms, ".4g") + (f" ±{b.rounds_spread:.0%}" if spread else "")  # rounds disagree
        row = [b.label, ms, _fmt(d["speedup_vs_eager"], ".3g", "×"),
               _fmt(d["speedup_vs_inductor"], ".3g", "×"), tbps]
        if result.flops:
            row.append(_fmt(d["tflop_per_s"], ".3g"))
        row += [kernels, _fmt(b.launches, "d")]
        if memory:
            pools = f" ({b.held_pools_mib:.4g} in graph pools)" if b.held_pools_mib else ""
            row += [_fmt(b.peak_mib, ".4g"), _fmt(b.held_mib, ".4g") + pools]
        row += [_fmt(b.compile_cold_s, ".2f"), _fmt(b.compile_warm_s, ".2f"), _fmt(b.max_error, ".3g")]
        table.add_row(*row)
    notes = [f"{b.name} failed: {b.error}" for b in result.backends if b.error]
    notes += [f"{b.label} timed, but {b.numerics.split(' differs from eager: ', 1)[-1]}"
              for b in result.backends if b.numerics]
    notes += [f"WARNING, timings may not be trusted: {w}" for w in result.timing_warnings]
    notes += [f"{result.bytes / 1e6:.4g} MB moved per call (inputs, weights, outputs once each)"]
    if result.copy_tb_per_s:
        notes.append(f"copy of the same bytes: {result.copy_tb_per_s:.3f} TB/s")
    if result.flops:
        notes.append(f"{result.flops / 1e9:.2f} GFLOP per call")
    best = result.best_inductor()
    if best is not None:
        notes.append(f"vs Inductor = vs its best mode here, {best.label}")
    table.caption = " · ".join(notes)
    table.caption_justify = "left"
    return table


def profile_table(result: BenchResult):
    """A rich Table of pipec's compile-time profiles, cold and warm, for every pipec row (each
    mode): one row per part (seconds and share of that compile's first call), the cold counts as
    caption; None without a pipec compile."""
    from rich.table import Table

    from .profile import PART_LABELS, format_seconds, profile_counts

    rows = [b for b in result.backends if b.name.startswith("pipec") and b.compile_profile]
    if not rows:
        return None
    table = Table(title=f"pipec compile-time profile · {result.model} (first call: compile and run)",
                  title_justify="left")
    table.add_column("part")
    for b in rows:
        prefix = "" if len(rows) == 1 else f"{b.name} "
        table.add_column(f"{prefix}cold", justify="right")
        table.add_column(f"{prefix}warm", justify="right")

    def cell(data: dict | None, part: str) -> str:
        seconds = data.get("seconds", {}).get(part) if data else None
        if seconds is None:
            return "-"
        return f"{format_seconds(seconds)} ({seconds / data['wall_s']:.0%})" if data["wall_s"] > 0 else "-"

    parts = list(dict.fromkeys(p for b in rows for p in b.compile_profile["seconds"]))
    for part in parts:
        table.add_row(PART_LABELS.get(part, part),
                      *(cell(profile, part) for b in rows for profile in (b.compile_profile, b.compile_profile_warm)))
    table.add_row("first call (wall)", *(format_seconds(profile["wall_s"]) if profile else "-"
                                         for b in rows for profile in (b.compile_profile, b.compile_profile_warm)))
    table.caption = " · ".join(f"{b.name} cold: {profile_counts(b.compile_profile)}" for b in rows)
    table.caption_justify = "left"
    return table


__all__ = ["bench_table", "profile_table"]

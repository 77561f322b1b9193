"""What the `pipec` commands print: the consoles, the compile progress, and the tables of a
compile report (compile, explain) and of an artifact (export, run)."""

from __future__ import annotations

import time

from rich import box
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

stderr = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


class StageProgress:
    """Rich progress on stderr: a spinner for the running stage, one line per finished stage."""

    def __init__(self, enabled: bool = True) -> None:
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=stderr, transient=True, disable=not enabled)
        self.task = self.progress.add_task("compiling", total=None)
        self.enabled = enabled
        self.started = time.perf_counter()
        self.hit = False

    def __call__(self, stage: str, impl: str, graph: str, event: str) -> None:
        if event == "start":
            self.started = time.perf_counter()
            self.hit = False
            self.progress.update(self.task, description=f"{stage} ({impl}) · {graph}")
        elif event == "hit":  # the stage's output came from the compile cache
            self.hit = True
        elif self.enabled:
            ms = (time.perf_counter() - self.started) * 1e3
            cached = "  (cache hit)" if self.hit else ""
            self.progress.console.print(f"[green]✓[/] {stage:<8} {impl:<10} {graph}  {ms:.1f} ms{cached}")

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)


def fmt_error(err: float | None) -> str:
    return "n/a" if err is None else f"{err:.3g}"


def fmt_shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def print_report(report, name: str, options, device: str, interpreted: bool, *, explain: bool) -> None:
    table = Table(title=f"pipec · {name}", show_header=False, title_justify="left")
    table.add_column("what", style="bold")
    table.add_column("value", overflow="fold")
    table.add_row("stages", f"capture {options.capture} → fusion {options.fusion} → codegen {options.codegen}"
                            f" → runtime {options.runtime}")
    table.add_row("device", device + (" (Triton interpreter)" if interpreted else ""))
    breaks = f" ({report.graph_break_count} graph breaks)" if report.graph_break_count else ""
    table.add_row("graphs", f"{report.graph_count}{breaks}")
    table.add_row("ops", str(report.op_count))
    table.add_row("kernels", str(report.kernel_count))
    table.add_row("fusions", str(report.fusion_count))
    table.add_row("extern ops", str(len(report.extern_ops)) +
                  (f" ({', '.join(report.extern_ops)})" if report.extern_ops else ""))
    table.add_row("not fused", str(len(report.not_fused)))
    table.add_row("max error vs eager", fmt_error(report.max_error) + ("  MISMATCH" if report.mismatch else ""))
    table.add_row("cache", fmt_cache(report))
    for stage, seconds in report.stage_seconds.items():
        table.add_row(f"time {stage}", f"{seconds * 1e3:.1f} ms")
    stdout.print(table)
    for note in report.notes:
        stdout.print(f"note: {note}", markup=False)
    if not explain:
        return
    print_profile(report.compile_profile)
    if report.break_reasons:
        stdout.print("[bold]graph breaks[/]")
        for r in report.break_reasons:
            stdout.print(f"  - {r}", markup=False)
    if report.extern_ops:
        ext = Table(title="extern ops (run through torch)", title_justify="left")
        ext.add_column("extern op", overflow="fold")
        ext.add_column("reason", overflow="fold")
        for target, reason in report.extern_ops.items():
            ext.add_row(target, reason)
        stdout.print(ext)
    if report.not_fused:
        nf = Table(title="not fused", title_justify="left")
        for col in ("first", "second", "reason"):
            nf.add_column(col, overflow="fold")
        for a, b, r in report.not_fused:
            nf.add_row(a, b, r)
        stdout.print(nf)
    for g in report.graphs:
        stdout.print(f"graph {g['name']}: {g['op_count']} ops, {g['kernel_count']} kernels, "
                     f"{g['fusion_count']} fusions", markup=False)
        if g.get("kernels"):
            stdout.print(kernel_table(g["kernels"]))


def print_profile(data: dict) -> None:
    from .profile import profile_table

    table = profile_table(data)
    if table is not None:
        stdout.print(table)


def kernel_table(rows: list[dict]):
    """The graph's kernels: what each computes (kind, iteration shape, ops) and how it runs."""
    table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
    # kind and shape never wrap; the long columns share what is left of the terminal's width
    table.add_column("kernel", overflow="fold", ratio=3)
    table.add_column("kind", no_wrap=True)
    table.add_column("shape", no_wrap=True)
    table.add_column("ops", overflow="fold", ratio=3)
    table.add_column("runs as", overflow="fold", ratio=3)
    for r in rows:
        ops = r["ops"] if len(r["ops"]) <= 6 else [*r["ops"][:5], f"… ({len(r['ops'])} in all)"]
        table.add_row(r["name"], r["kind"], "×".join(r["shape"]), ", ".join(ops), r["runs_as"])
    return table


def fmt_cache(report) -> str:
    """`local: hits capture 1, fusion 1, codegen 1; misses none` (or `off`)."""
    if report.cache is None:
        return "off"

    def counts(d: dict) -> str:
        return ", ".join(f"{s} {n}" for s, n in d.items() if n) or "none"

    return f"{report.cache}: hits {counts(report.cache_hits)}; misses {counts(report.cache_misses)}"


def print_code(kernels) -> None:
    if not kernels:
        print("# (no Triton kernels were generated)")
    for kname, source in kernels:
        print(f"# ---- {kname}")
        print(source.rstrip())
        print()


__all__ = ["StageProgress", "fmt_cache", "fmt_error", "fmt_shape", "kernel_table", "print_code", "print_profile",
           "print_report", "stderr", "stdout"]

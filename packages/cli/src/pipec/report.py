"""`pipec report MODEL.py -o report.html`: one self-contained HTML page about a compile.

It holds what `pipec explain --json` collects (ExplainReport.to_dict, with code) and, from the
IR documents the pipeline kept (GraphStats.plan, .program), per graph the fusion picture
(report_svg.py) and each kernel's launch config; what autotuning picked comes from the
runtime's `pipec.tuning` log of the run. Sections: summary and max error against eager, graph
breaks with the user's source lines, the compile-time profile, then per graph its picture,
kernels (source, launch configs, tuning), library calls and rejected fusions.

The page loads nothing: inline CSS, inline SVG, no script, no URL.
"""

from __future__ import annotations

import linecache
import re
from html import escape

from .report_svg import fusion_svg, legend_html

CSS = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1200px; color: #111827; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #e5e7eb; }
h3 { font-size: 15px; margin-top: 20px; }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid #e5e7eb; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f9fafb; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #f8fafc; border: 1px solid #e5e7eb; padding: 8px; overflow-x: auto; font-size: 12px; }
code { font-family: ui-monospace, monospace; }
.bad { color: #b91c1c; font-weight: bold; } .ok { color: #15803d; font-weight: bold; }
.figure { overflow-x: auto; border: 1px solid #e5e7eb; padding: 8px; background: #ffffff; }
.legend span { margin-right: 12px; white-space: nowrap; }
.swatch { display: inline-block; width: 12px; height: 12px; border: 1px solid #4b5563; margin-right: 4px;
          vertical-align: middle; }
details { margin: 6px 0; } summary { cursor: pointer; font-family: ui-monospace, monospace; }
.muted { color: #6b7280; }
"""

_WHERE = re.compile(r"\((?P<file>[^()]+):(?P<line>\d+)\)$")


# ---------------------------------------------------------------- collecting


def picture_of(plan) -> dict:
    """report_svg's input for one KernelPlan: its graph's inputs and ops, kernels, rejections."""
    from pipec_ir import OPS, kind_of

    graph = plan.graph
    return {
        "inputs": [{"name": i.name, "role": i.role, "type": str(i.type)} for i in graph.inputs],
        "nodes": [{"name": n.name, "op": n.op, "label": _label(n), "kind": kind_of(n.op) if n.op in OPS else "other",
                   "inputs": list(n.inputs), "type": str(n.type)} for n in graph.nodes],
        "kernels": [{"name": k.name, "kind": k.kind, "nodes": list(k.nodes)} for k in plan.kernels],
        "rejected": [{"first": r.first, "second": r.second, "reason": r.reason} for r in plan.rejected],
    }


def _label(node, longest: int = 28) -> str:
    """An op's label in the picture: its op, an extern call by its ATen op (`aten.mm.default`: mm)."""
    target = node.attr("target") if node.op == "extern" else None
    if not target:
        return node.op
    parts = str(target).split(".")
    name = parts[1] if len(parts) > 2 and parts[0] in ("aten", "prims", "pipec") else str(target)
    return name if len(name) <= longest else name[:longest - 1] + "…"


def launch_of(kernel, tuning: list[str], interpreted: bool) -> dict:
    """One Triton kernel's launch: grid, candidate configs, and what autotuning did with them."""
    grid = [f"cdiv({expr}, {name})" if name else str(expr) for expr, name in kernel.grid]
    configs = [" ".join([*(f"{k}={v}" for k, v in c.constants), f"warps={c.num_warps}", f"stages={c.num_stages}"])
               for c in kernel.configs]
    mine = [line for line in tuning if line.startswith((f"{kernel.name}:", f"{kernel.name} "))]
    if mine:
        tuned = None
    elif len(configs) <= 1:
        tuned = "one config: nothing to tune"
    elif interpreted:
        tuned = "not tuned: Triton's interpreter runs the first config"
    else:
        tuned = "not timed in this run (autotuning off, or a choice already made: the tuning cache, an identical kernel)"
    return {"grid": grid, "sizes": [f"{name}={expr}" for name, expr in kernel.sizes], "configs": configs,
            "tuning": mine, "tuning_note": tuned}


def collect(report, session, *, model: str, device: str, interpreted: bool, options, tuning: list[str],
            versions: dict[str, str] | None = None) -> dict:
    """Everything the page shows, as plain data: `report.to_dict(with_code=True)` (what `pipec
    explain --json` prints) with, per graph, `picture` and each Triton kernel's `launch`."""
    from pipec_ir.text import format_plan

    data = report.to_dict(with_code=True)
    data.update(model=model, device=device, interpreter=interpreted, versions=versions or {},
                stages={"capture": options.capture, "fusion": options.fusion, "codegen": options.codegen,
                        "runtime": options.runtime},
                tuning=list(tuning))
    for graph, stats in zip(data["graphs"], session.graphs):
        graph["picture"] = picture_of(stats.plan) if stats.plan is not None else None
        program = stats.program
        graph["launch"] = ({k.name: launch_of(k, tuning, interpreted) for k in program.kernels}
                           if program is not None else {})
        graph["sources"] = dict(stats.kernels)
        graph["plan_text"] = format_plan(stats.plan) if stats.plan is not None else None
        graph["choices"] = [line for line in tuning if line.startswith("choice ")]
    return data


# ---------------------------------------------------------------- the page


def _e(value) -> str:
    return escape(str(value), quote=True)


def _table(header: list[str] | None, rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    """A table of already-escaped cells (no header row when `header` is None)."""
    head = "<thead><tr>" + "".join(f"<th>{h}</th>" for h in header) + "</tr></thead>" if header else ""
    body = "".join("<tr>" + "".join(f'<td class="num">{c}</td>' if i in numeric else f"<td>{c}</td>"
                                    for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table>{head}<tbody>{body}</tbody></table>"


def _source_line(reason: str) -> str:
    """The user's line a break reason points at (`... (file.py:12)`), as a code excerpt."""
    match = _WHERE.search(reason)
    if match is None:
        return ""
    line = linecache.getline(match["file"], int(match["line"])).rstrip()
    if not line:
        return ""
    return f'<pre><code><span class="muted">{_e(match["line"])}:</span> {_e(line)}</code></pre>'


def _summary(data: dict) -> str:
    stages = data["stages"]
    error = "n/a" if data["max_error"] is None else f"{data['max_error']:.3g}"
    verdict = (f'<span class="bad">MISMATCH: {_e(data["mismatch"])}</span>' if data["mismatch"]
               else '<span class="ok">within tolerance</span>')
    where = data["device"] + (" (Triton's interpreter)" if data["interpreter"] else "")
    rows = [
        ["stages", _e(f"capture {stages['capture']} → fusion {stages['fusion']} → codegen {stages['codegen']}"
                      f" → runtime {stages['runtime']}")],
        ["device", _e(where)],
        ["graphs", _e(f"{data['graph_count']} ({data['graph_break_count']} graph breaks)")],
        ["ops", _e(data["op_count"])], ["kernels", _e(data["kernel_count"])], ["fusions", _e(data["fusion_count"])],
        ["library calls (extern ops)", _e(len(data["extern_ops"]))], ["not fused", _e(len(data["not_fused"]))],
        ["max error vs eager", f"{_e(error)} · {verdict}"],
        ["compile cache", _e(data["cache"] or "off")],
    ]
    if data["versions"]:
        rows.append(["versions", _e(", ".join(f"{k} {v}" for k, v in data["versions"].items()))])
    notes = "".join(f"<p>note: {_e(n)}</p>" for n in data["notes"])
    return "<h2>Summary</h2>" + _table(None, rows) + notes


def _breaks(data: dict) -> str:
    if not data["break_reasons"]:
        return "<h2>Graph breaks</h2><p>None: each frame compiled to one graph.</p>"
    items = "".join(f"<li>{_e(r)}{_source_line(r)}</li>" for r in data["break_reasons"])
    return f"<h2>Graph breaks</h2><ol>{items}</ol>"


def _profile(data: dict) -> str:
    from .profile import PART_LABELS, format_seconds, profile_counts

    profile = data.get("compile_profile") or {}
    if not profile.get("seconds"):
        return ""
    wall = profile.get("wall_s") or 0.0
    rows = [[_e(PART_LABELS.get(part, part)), _e(format_seconds(s)), _e(f"{s / wall:.0%}" if wall else "-")]
            for part, s in profile["seconds"].items()]
    rows.append(["<b>first call (wall)</b>", _e(format_seconds(wall)), "100%"])
    stage_rows = [[_e(g["name"]), *(_e(f"{g['stage_seconds'].get(s, 0) * 1e3:.1f} ms")
                                    for s in ("capture", "fusion", "codegen", "runtime"))]
                  for g in data["graphs"]]
    return ("<h2>Compile-time profile</h2><p>Where the first call's time went (compile and run).</p>"
            + _table(["part", "seconds", "share"], rows, {1, 2})
            + f'<p class="muted">{_e(profile_counts(profile))}</p>'
            + "<h3>Stages per graph</h3>"
            + _table(["graph", "capture", "fusion", "codegen", "runtime load"], stage_rows, {1, 2, 3, 4}))


def _kernel_details(name: str, launch: dict | None, source: str | None) -> str:
    parts = []
    if launch:
        rows = [["grid", _e(", ".join(launch["grid"]) or "1")], ["sizes", _e(", ".join(launch["sizes"]) or "-")],
                ["configs", "<br>".join(f"{i}: {_e(c)}" for i, c in enumerate(launch["configs"]))],
                ["tuning", "<br>".join(_e(t) for t in launch["tuning"]) or _e(launch["tuning_note"])]]
        parts.append(_table(["launch", ""], rows))
    if source:
        parts.append(f"<pre><code>{_e(source.rstrip())}</code></pre>")
    return f'<details id="kernel-{_e(name)}"><summary>{_e(name)}</summary>{"".join(parts)}</details>'


def _graph(index: int, g: dict) -> str:
    out = [f'<h2 id="graph-{_e(g["name"])}">Graph {_e(g["name"])} <span class="muted">({_e(g["kind"])})</span></h2>',
           f"<p>{_e(g['op_count'])} ops, {_e(g['kernel_count'])} kernels, {_e(g['fusion_count'])} fusions.</p>"]
    picture = g.get("picture")
    if picture is not None:
        out.append("<h3>Fusion graph</h3>")
        svg = fusion_svg(picture, "fusion graph of " + g["name"], uid=str(index))
        out.append(f'<div class="figure">{svg}</div>')
        out.append(legend_html())
        if picture["rejected"]:
            items = "".join(f"<li>{_e(r['first'])} + {_e(r['second'])}: {_e(r['reason'])}</li>"
                            for r in picture["rejected"])
            out.append(f"<p>Rejected fusions (the numbered dashed lines):</p><ol>{items}</ol>")
    if g.get("kernels"):
        rows = [[f'<a href="#kernel-{_e(k["name"])}">{_e(k["name"])}</a>' if k["name"] in g["sources"] else _e(k["name"]),
                 _e(k["kind"]), _e("[" + ", ".join(k["shape"]) + "]"), _e(", ".join(k["ops"])), _e(k["runs_as"])]
                for k in g["kernels"]]
        out.append("<h3>Kernels</h3>" + _table(["kernel", "kind", "shape", "ops", "runs as"], rows))
    if g.get("choices"):
        out.append("<h3>GEMM choice groups timed</h3><ul>" + "".join(f"<li>{_e(c)}</li>" for c in g["choices"])
                   + "</ul>")
    if g["sources"]:
        out.append("<h3>Kernel sources and launches</h3>")
        out.extend(_kernel_details(name, g["launch"].get(name), src) for name, src in g["sources"].items())
    if g["extern_ops"]:
        rows = [[_e(x["target"]), _e(x["reason"])] for x in g["extern_ops"]]
        out.append("<h3>Library calls</h3>" + _table(["ATen op", "why"], rows))
    if g.get("plan_text"):
        out.append(f"<details><summary>the kernel plan as IR text (--dump-ir)</summary>"
                   f"<pre><code>{_e(g['plan_text'])}</code></pre></details>")
    return "".join(out)


def render(data: dict) -> str:
    """The page (see the module docstring): well-formed XHTML-compatible markup."""
    title = f"pipec report · {data['model']}"
    body = [f"<h1>{_e(title)}</h1>", _summary(data), _breaks(data), _profile(data)]
    body.extend(_graph(i, g) for i, g in enumerate(data["graphs"]))
    body.append('<p class="muted">Made by <code>pipec report</code>. This page loads nothing from anywhere.</p>')
    return ("<!DOCTYPE html>\n"
            f'<html lang="en"><head><meta charset="utf-8"/><title>{_e(title)}</title>'
            f"<style>{CSS}</style></head><body>{''.join(body)}</body></html>\n")


__all__ = ["collect", "launch_of", "picture_of", "render"]

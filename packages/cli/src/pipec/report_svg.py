"""The fusion picture of `pipec report`: one graph's ops as boxes, each kernel a cluster around
the ops it holds, data flow as arrows, and every rejected fusion as a dashed red line between
the two groups' nodes, numbered, its reason in the line's tooltip and in the legend beside it.

Laid out without a graph library: kernels go in rows by their depth in the kernel DAG (a row
holds every kernel whose inputs all come from rows above), the ops inside a kernel in rows by
their depth inside it. Graph inputs and values no kernel computes (literals) form the first row.
The input is plain data (`picture`: made by report.py from a KernelPlan), the output an inline
SVG element: no script, no external reference.
"""

from __future__ import annotations

from html import escape

CHAR_W = 6.6  # width of one character of the 11px monospace font
NODE_H = 22
NODE_GAP = 10
ROW_GAP = 16
PAD = 8
TITLE_H = 16
CLUSTER_GAP = 22
LEVEL_GAP = 34
MAX_ROW_W = 560  # ops of one depth inside a kernel wrap past this width
MAX_W = 1500  # kernels of one level wrap past this width

# fill of an op's box by its kind (pipec_ir.kind_of); stroke of a kernel's cluster by its kind
KIND_FILL = {"pointwise": "#dbeafe", "reduction": "#fde68a", "scan": "#fbcfe8", "matmul": "#fecaca",
             "indexing": "#bbf7d0", "view": "#e5e7eb", "extern": "#ddd6fe", "collective": "#fed7aa",
             "input": "#ffffff"}
OTHER_FILL = "#f3f4f6"
KERNEL_STROKE = {"pointwise": "#2563eb", "reduction": "#b45309", "matmul": "#b91c1c", "extern": "#6d28d9",
                 "view": "#6b7280", "scan": "#be185d", "indexing": "#15803d", "scatter": "#0f766e",
                 "collective": "#c2410c"}
REJECTED = "#dc2626"


def _text_w(text: str) -> float:
    return len(text) * CHAR_W


def _node_w(label: str) -> float:
    return max(44.0, _text_w(label) + 14)


class _Box:
    __slots__ = ("x", "y", "w", "h")

    def __init__(self, w: float = 0, h: float = 0):
        self.x = self.y = 0.0
        self.w, self.h = w, h


def layout(picture: dict) -> dict:
    """Positions: {"nodes": {name: (cx, cy, w)}, "clusters": [(kernel index or -1, x, y, w, h)],
    "size": (w, h)}. Kernel index -1 is the row of inputs and literals."""
    nodes = {n["name"]: n for n in picture["nodes"]}
    kernels = picture["kernels"]
    owner: dict[str, int] = {}
    for i, k in enumerate(kernels):  # a view inside a kernel is drawn in its own view kernel, if any
        for name in k["nodes"]:
            if name not in nodes:
                continue
            prev = owner.get(name)
            if prev is None or (k["kind"] == "view" and kernels[prev]["kind"] != "view"
                                and nodes[name]["kind"] == "view"):
                owner[name] = i
    free = [i["name"] for i in picture["inputs"]] + [n for n in nodes if n not in owner]
    for name in free:
        owner[name] = -1
    members: dict[int, list[str]] = {-1: free}
    for n in picture["nodes"]:
        if owner[n["name"]] >= 0:
            members.setdefault(owner[n["name"]], []).append(n["name"])

    # kernel levels: one past the deepest kernel it reads from
    level = {-1: 0}
    for i in range(len(kernels)):
        deps = {owner[m] for n in members.get(i, ()) for m in nodes[n]["inputs"] if m in owner}
        level[i] = 1 + max((level[d] for d in deps if d in level and d != i), default=0)

    def cluster_box(index: int) -> tuple[_Box, dict[str, tuple[float, float, float]]]:
        names = members.get(index, [])
        depth: dict[str, int] = {}
        for name in names:  # graph order is topological
            node = nodes.get(name)
            ins = node["inputs"] if node else ()
            depth[name] = 1 + max((depth[m] for m in ins if m in depth), default=-1)
        rows: list[list[str]] = []
        for d in sorted(set(depth.values())):
            row, width = [], 0.0
            for name in [n for n in names if depth[n] == d]:
                w = _node_w(label_of(name))
                if row and width + w > MAX_ROW_W:
                    rows.append(row)
                    row, width = [], 0.0
                row.append(name)
                width += w + NODE_GAP
            rows.append(row)
        title = title_of(index)
        inner_w = max([_text_w(title)] + [sum(_node_w(label_of(n)) + NODE_GAP for n in r) - NODE_GAP
                                          for r in rows])
        box = _Box(inner_w + 2 * PAD, TITLE_H + PAD + max(len(rows), 1) * (NODE_H + ROW_GAP) - ROW_GAP + PAD)
        local = {}
        y = TITLE_H + PAD
        for r in rows:
            x = PAD
            for name in r:
                w = _node_w(label_of(name))
                local[name] = (x + w / 2, y + NODE_H / 2, w)
                x += w + NODE_GAP
            y += NODE_H + ROW_GAP
        return box, local

    def label_of(name: str) -> str:
        node = nodes.get(name)
        return node.get("label", node["op"]) if node else name

    def title_of(index: int) -> str:
        return "inputs and literals" if index < 0 else f"{kernels[index]['name']} ({kernels[index]['kind']})"

    positions: dict[str, tuple[float, float, float]] = {}
    clusters = []
    y, total_w = 0.0, 0.0
    order = [-1] + list(range(len(kernels))) if free else list(range(len(kernels)))
    for lv in sorted({level[i] for i in order}):
        x, row_h = 0.0, 0.0
        for i in [i for i in order if level[i] == lv]:
            if not members.get(i) and i >= 0 and not kernels[i]["nodes"]:
                continue
            box, local = cluster_box(i)
            if x > 0 and x + box.w > MAX_W:
                y += row_h + LEVEL_GAP
                x, row_h = 0.0, 0.0
            box.x, box.y = x, y
            for name, (cx, cy, w) in local.items():
                positions[name] = (box.x + cx, box.y + cy, w)
            clusters.append((i, box.x, box.y, box.w, box.h))
            x += box.w + CLUSTER_GAP
            row_h = max(row_h, box.h)
            total_w = max(total_w, x - CLUSTER_GAP)
        y += row_h + LEVEL_GAP
    return {"nodes": positions, "clusters": clusters, "size": (total_w, max(y - LEVEL_GAP, 0)),
            "owner": owner}


def fusion_svg(picture: dict, title: str = "fusion graph", uid: str = "0") -> str:
    """The picture of one graph as an inline <svg> element (see the module docstring); `uid` makes
    its ids unique in a page of several."""
    nodes = {n["name"]: n for n in picture["nodes"]}
    inputs = {i["name"]: i for i in picture["inputs"]}
    kernels = picture["kernels"]
    placed = layout(picture)
    pos, margin = placed["nodes"], 12
    width, height = placed["size"]
    width, height = width + 2 * margin, height + 2 * margin
    out = [f'<svg class="fusion" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
           f'height="{height:.0f}" role="img" aria-label="{escape(title)}" font-family="monospace" font-size="11">',
           f'<defs><marker id="arrow-{escape(uid)}" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="6" markerHeight="6" '
           'orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" fill="#6b7280"/></marker></defs>',
           f'<g transform="translate({margin},{margin})">']
    for index, x, y, w, h in placed["clusters"]:
        if index < 0:
            out.append(f'<g class="inputs"><rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" '
                       f'fill="#fafafa" stroke="#d1d5db" stroke-dasharray="2 2"/>'
                       f'<text x="{x + PAD:.1f}" y="{y + 12:.1f}" fill="#6b7280">inputs and literals</text></g>')
            continue
        k = kernels[index]
        stroke = KERNEL_STROKE.get(k["kind"], "#374151")
        dash = ' stroke-dasharray="5 3"' if k["kind"] in ("extern", "view") else ""
        ops = ", ".join(nodes[n]["op"] for n in k["nodes"] if n in nodes)
        out.append(f'<g class="kernel" data-kernel="{escape(k["name"])}" data-kind="{escape(k["kind"])}">'
                   f'<title>{escape(k["name"])} ({escape(k["kind"])}): {escape(ops)}</title>'
                   f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{h:.1f}" rx="6" fill="#ffffff" '
                   f'fill-opacity="0.6" stroke="{stroke}" stroke-width="1.5"{dash}/>'
                   f'<text x="{x + PAD:.1f}" y="{y + 12:.1f}" fill="{stroke}" font-weight="bold">'
                   f'{escape(k["name"])} ({escape(k["kind"])})</text></g>')
    # data flow: producer's bottom to consumer's top
    for n in picture["nodes"]:
        if n["name"] not in pos:
            continue
        x2, y2, _ = pos[n["name"]]
        for m in dict.fromkeys(n["inputs"]):
            if m not in pos:
                continue
            x1, y1, _ = pos[m]
            out.append(f'<path class="edge" d="{_curve(x1, y1 + NODE_H / 2, x2, y2 - NODE_H / 2)}" fill="none" '
                       f'stroke="#9ca3af" stroke-width="1" marker-end="url(#arrow-{escape(uid)})"/>')
    for name, (cx, cy, w) in pos.items():
        node = nodes.get(name)
        if node is not None:
            label, kind, what = node.get("label", node["op"]), node["kind"], f'{name} = {node["op"]}  # {node["type"]}'
        else:
            item = inputs.get(name, {"role": "input", "type": ""})
            label, kind, what = name, "input", f'{item["role"]} {name}  # {item["type"]}'
        fill = KIND_FILL.get(kind, OTHER_FILL)
        out.append(f'<g class="node" data-node="{escape(name)}"><title>{escape(what)}</title>'
                   f'<rect x="{cx - w / 2:.1f}" y="{cy - NODE_H / 2:.1f}" width="{w:.1f}" height="{NODE_H}" rx="4" '
                   f'fill="{fill}" stroke="#4b5563" stroke-width="0.8"/>'
                   f'<text x="{cx:.1f}" y="{cy + 4:.1f}" text-anchor="middle" fill="#111827">{escape(label)}</text></g>')
    for number, r in enumerate(picture.get("rejected", ()), 1):
        if r["first"] not in pos or r["second"] not in pos:
            continue
        x1, y1, _ = pos[r["first"]]
        x2, y2, _ = pos[r["second"]]
        mx, my = (x1 + x2) / 2 + 14, (y1 + y2) / 2
        reason = f'not fused: {r["first"]} + {r["second"]}: {r["reason"]}'
        out.append(f'<g class="rejected" data-first="{escape(r["first"])}" data-second="{escape(r["second"])}">'
                   f'<title>{escape(reason)}</title>'
                   f'<path d="M{x1:.1f},{y1:.1f} Q{mx + 30:.1f},{my:.1f} {x2:.1f},{y2:.1f}" fill="none" '
                   f'stroke="{REJECTED}" stroke-width="1.5" stroke-dasharray="4 3"/>'
                   f'<circle cx="{mx + 8:.1f}" cy="{my:.1f}" r="8" fill="{REJECTED}"/>'
                   f'<text x="{mx + 8:.1f}" y="{my + 4:.1f}" text-anchor="middle" fill="#ffffff" '
                   f'font-size="10">{number}</text></g>')
    out.append("</g></svg>")
    return "".join(out)


def _curve(x1: float, y1: float, x2: float, y2: float) -> str:
    dy = max(18.0, abs(y2 - y1) / 2)
    return f"M{x1:.1f},{y1:.1f} C{x1:.1f},{y1 + dy:.1f} {x2:.1f},{y2 - dy:.1f} {x2:.1f},{y2:.1f}"


def legend_html() -> str:
    """The colours of the picture, as an HTML list."""
    items = [f'<span class="swatch" style="background:{fill}"></span>{escape(kind)}'
             for kind, fill in KIND_FILL.items() if kind != "input"]
    items.append(f'<span class="swatch" style="background:#fff;border-color:{REJECTED};border-style:dashed">'
                 '</span>rejected fusion (numbered; hover for the reason)')
    return '<p class="legend">' + " ".join(f"<span>{i}</span>" for i in items) + "</p>"


__all__ = ["fusion_svg", "layout", "legend_html"]

"""Sibling GEMMs: products of one left operand in one launch, as a choice alternative.

A transformer layer computes its query, key and value as three Linears of the same hidden
states. Fusion keeps one matmul per kernel, so codegen makes three matmul kernels, each its own
choice group (matmul_choice.py), and on the GPU three launches: each a little more than one wave
of tiles at BERT-large's shape, with the GPU part idle at every launch's tail.
cuBLAS over the concatenated weights took 42.9 µs against 52.3 for three products on the H100
(benchmarks/qkv_concat.py), but concatenating weights costs a copy on every call (or a cached
copy that goes stale when a parameter changes behind its version counter); this module needs
neither. Sibling groups, here, become one choice group whose alternatives are:

- each alternative the siblings all have (`template`, `library`, ...): their steps one after the
  other, as before; `template` stays the default;
- `grouped`: one launch of a kernel whose grid holds every sibling's tiles: a program finds its
  sibling from its column block and runs that sibling's own template body (the same source, so
  the same epilogue and numerics) on its own weight, bias and output. No operand is copied.

The runtime times them (docs/IR.md, "Choice groups") and keeps `grouped` only where it wins.

Off by default (the codegen option `grouped_matmuls=True` turns it on). On an H100 (session 42)
the first version, which called the body once per sibling, lost: Triton inlined each call with
shared memory of its own, so the large configs asked for 288 KiB and failed, and the one left,
128 x 128, took 47.7 µs for RoBERTa's Q, K and V (4096 x 768 x 768 each) against 36.3 for the
three template launches. The branches now pick pointers only and the body is inlined once; that
version has not yet been timed on a GPU (docs/performance.md, "Sibling GEMMs in one launch").

Siblings are choice groups whose `template` alternative is one launch of kernels with the same
source (up to the kernel's name and docstring), sizes, grid and configs, reading the same left
operand (`a_ptr`), with static sizes and N a multiple of every pointer config's GRID_N (the
persistent TMA configs are left out: their programs stride over all tiles). A later sibling joins
the first when nothing between them that it reads is made there, except views (extern view
steps) of values made before the first, which move up with it; steps between that read the first
siblings' results stay after the joined group, which takes the first sibling's place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import sympy
from pipec_ir import TMA_CONSTANT, Step, TritonKernel, get_attr, make_attrs

from .view_steps import VIEW_TARGETS

GROUPED = "grouped"
MAX_SIBLINGS = 8
WINDOW = 32  # steps from the first sibling's group to the start of a later one
# the extern steps codegen makes for views (never copies): they may move up with a sibling
_VIEW_STEPS = frozenset(VIEW_TARGETS.values())


@dataclass
class _Group:
    name: str
    start: int
    end: int  # steps[start:end]
    alternatives: dict[str, list[Step]]
    default: str | None
    kernel: TritonKernel | None = None  # the template alternative's kernel, when it is one launch
    launch: Step | None = None
    key: tuple | None = None

    def reads(self) -> set[str]:
        """Values its steps read that none of its steps make."""
        made = {o for steps in self.alternatives.values() for s in steps for o in s.outputs}
        return {i for steps in self.alternatives.values() for s in steps for i in s.inputs} - made

    def writes(self) -> set[str]:
        return {o for steps in self.alternatives.values() for s in steps for o in s.outputs}


def group_sibling_matmuls(steps: list[Step], kernels: list[TritonKernel]) -> tuple[list[Step], list[TritonKernel]]:
    """(steps, kernels) with each set of sibling matmul groups (module docstring) made one choice
    group with a `grouped` alternative; everything else as it was."""
    by_name = {k.name: k for k in kernels}
    groups = [keyed for g in _choice_groups(steps) if (keyed := _with_sibling_key(g, by_name)) is not None]
    joined: list[tuple[list[_Group], set[int]]] = []  # siblings, and the steps that move up with them
    for i, first in enumerate(groups):
        if any(m[0].start <= first.start < m[-1].end for m, _ in joined):
            continue  # inside the span of siblings already joined (rewritten spans never overlap)
        members, hoisted = [first], set()
        for later in groups[i + 1:]:
            if later.start - first.end > WINDOW or len(members) == MAX_SIBLINGS:
                break
            moved = _hoisted(steps, members, later) if later.key == first.key else None
            if moved is not None:
                members.append(later)
                hoisted.update(moved)
        if len(members) > 1:
            joined.append((members, hoisted))
    kernels = list(kernels)
    for members, hoisted in reversed(joined):  # last first: the indices of the earlier spans stay valid
        kernel = grouped_kernel(f"{members[0].kernel.name}_grouped", [m.kernel for m in members])
        kernels.append(kernel)
        steps = _rewrite(steps, members, hoisted, kernel)
    return steps, kernels


def _choice_groups(steps: list[Step]) -> list[_Group]:
    out: list[_Group] = []
    for k, step in enumerate(steps):
        name = get_attr(step.attrs, "choice")
        if name is None:
            continue
        if not out or out[-1].name != name or out[-1].end != k:
            out.append(_Group(name, k, k, {}, None))
        group = out[-1]
        group.end = k + 1
        alternative = get_attr(step.attrs, "alternative")
        group.alternatives.setdefault(alternative, []).append(step)
        if get_attr(step.attrs, "default"):
            group.default = alternative
    return out


def _with_sibling_key(group: _Group, by_name: dict[str, TritonKernel]) -> _Group | None:
    """`group` with its template kernel, launch and the key two sibling groups share (module
    docstring), or None where it cannot have siblings."""
    template = group.alternatives.get("template", [])
    if len(template) != 1 or template[0].kind != "launch" or group.default != "template":
        return None
    launch = template[0]
    if set(dict(launch.attrs)) - {"choice", "alternative", "default"}:
        return None
    kernel = by_name.get(launch.target)
    if kernel is None or not kernel.args or kernel.args[0] != "a_ptr" or len(kernel.grid) != 2:
        return None
    (m, m_name), (n, n_name) = kernel.grid
    sizes = dict(kernel.sizes)
    if (m_name, n_name) != ("GRID_M", "GRID_N") or "N" not in sizes or not all(sympy.sympify(v).is_Integer for v in sizes.values()):
        return None
    configs = _pointer_configs(kernel, int(sympy.sympify(n)) if sympy.sympify(n).is_Integer else None)
    body = _body(kernel)
    if not configs or body is None:
        return None
    key = (body, kernel.args, kernel.sizes, kernel.grid, configs, launch.inputs[0], tuple(group.alternatives))
    return replace(group, kernel=kernel, launch=launch, key=key)


def _pointer_configs(kernel: TritonKernel, n: int | None) -> tuple:
    """The kernel's one-tile-per-program configs whose GRID_N divides N (the grouped grid stacks the
    siblings' column blocks: cdiv(siblings * N, GRID_N) must be siblings * cdiv(N, GRID_N))."""
    if n is None:
        return ()
    return tuple(c for c in kernel.configs
                 if not dict(c.constants).get(TMA_CONSTANT) and n % dict(c.constants)["GRID_N"] == 0)


def _body(kernel: TritonKernel) -> str | None:
    """The kernel's source without its name and docstring (which names the values it writes), or
    None where the source is not the template's layout (one @triton.jit def; no third grid axis)."""
    lines = kernel.source.split("\n")
    at = [k for k, line in enumerate(lines) if line.startswith(f"def {kernel.name}(")]
    if len(at) != 1 or at[0] == 0 or lines[at[0] - 1] != "@triton.jit":
        return None
    d = at[0]
    if d + 1 < len(lines) and lines[d + 1].startswith('    """') and lines[d + 1].count('"""') == 2:
        lines = lines[:d + 1] + lines[d + 2:]
    text = "\n".join(lines).replace(f"def {kernel.name}(", "def _sibling(", 1)
    if "program_id(2)" in text or "num_programs(2)" in text:
        return None
    return text


def _hoisted(steps: list[Step], members: list[_Group], later: _Group) -> list[int] | None:
    """Indices of the steps between the first member and `later` that must move up with `later`
    (views making what it reads), or None when `later` cannot join: it reads a value an earlier
    member writes, or one made between them by a step that cannot move (not a view of values made
    before the first member)."""
    member_writes = set().union(*(m.writes() for m in members))
    reads = later.reads()
    if reads & member_writes:
        return None
    inside = {k for m in members for k in range(m.start, m.end)}
    between = [k for k in range(members[0].start, later.start) if k not in inside]
    made_at = {o: k for k in between for o in steps[k].outputs}
    needed: list[int] = []
    pending = [v for v in reads if v in made_at]
    while pending:
        k = made_at[pending.pop()]
        if k in needed:
            continue
        step = steps[k]
        if step.kind != "extern" or step.target not in _VIEW_STEPS or get_attr(step.attrs, "inplace"):
            return None
        if set(step.inputs) & member_writes:
            return None
        needed.append(k)
        pending += [v for v in step.inputs if v in made_at]
    for k in between:  # a write in place between them into what `later` reads orders them
        if {t for _, t in (get_attr(steps[k].attrs, "inplace", ()) or ())} & reads:
            return None
    return sorted(needed)


def _rewrite(steps: list[Step], members: list[_Group], hoisted: set[int], kernel: TritonKernel) -> list[Step]:
    first, last = members[0], members[-1]
    inside = {k for m in members for k in range(m.start, m.end)}
    name = first.name
    group: list[Step] = []
    for alternative in first.alternatives:
        for member in members:
            group += [_retagged(s, name) for s in member.alternatives[alternative]]
        if alternative == "template":
            inputs = (first.launch.inputs[0],) + tuple(i for m in members for i in m.launch.inputs[1:])
            outputs = tuple(o for m in members for o in m.launch.outputs)
            group.append(Step("launch", kernel.name, inputs, outputs,
                              make_attrs(choice=name, alternative=GROUPED)))
    between = [steps[k] for k in range(first.start, last.end) if k not in inside and k not in hoisted]
    return (steps[:first.start] + [steps[k] for k in sorted(hoisted)] + group + between + steps[last.end:])


def _retagged(step: Step, name: str) -> Step:
    attrs = dict(step.attrs)
    attrs["choice"] = name
    return Step(step.kind, step.target, step.inputs, step.outputs, make_attrs(**attrs))


def grouped_kernel(name: str, siblings: list[TritonKernel]) -> TritonKernel:
    """One kernel over the siblings' tiles: grid axis 1 holds each sibling's column blocks in turn,
    and a program runs its sibling's template body (`_sibling`, the program ids passed in)."""
    first = siblings[0]
    lines = _body(first).split("\n")
    d = next(k for k, line in enumerate(lines) if line.startswith("def _sibling("))
    params = lines[d][len("def _sibling("):-2]  # "a_ptr, b_ptr, ..., SUBTILE: tl.constexpr"
    body = "\n".join(lines[d + 1:])
    for old, new in (("tl.program_id(0)", "pid0"), ("tl.program_id(1)", "pid1"),
                     ("tl.num_programs(0)", "npid0"), ("tl.num_programs(1)", "npid1")):
        body = body.replace(old, new)
    preamble = "\n".join(lines[:d - 1]).rstrip()
    # one name in every grouped kernel: a model's layers share its source up to the kernel's name
    function = f"@triton.jit\ndef _sibling(pid0, pid1, npid0, npid1, {params}):\n{body}"
    names = [p.split(":")[0].strip() for p in params.split(",")]
    pointers = len(first.args)
    n_inputs = pointers - _outputs_of(first)
    constants = names[pointers:]  # sizes, then the configs' constexprs
    ins = [f"{arg}_{j}" for j in range(len(siblings)) for arg in first.args[1:n_inputs]]
    outs = [f"{arg}_{j}" for j in range(len(siblings)) for arg in first.args[n_inputs:]]
    signature = ", ".join(["a_ptr", *ins, *outs] + [p.strip() for p in params.split(",")][pointers:])
    # the branches pick pointers only; the body is inlined once (one call per sibling, each
    # inlined, held three copies of its shared-memory tiles: the 128 x 256 configs did not fit)
    own_args = list(first.args[1:])
    branches = []
    for j in range(len(siblings)):
        keyword = "if" if j == 0 else ("elif" if j < len(siblings) - 1 else "else")
        condition = f" sibling == {j}" if keyword != "else" else ""
        picks = ", ".join(f"{arg}_{j}" for arg in own_args)
        branches.append(f"    {keyword}{condition}:\n        {', '.join(own_args)} = {picks}")
    call = (f"    _sibling(pid0, pid1 - sibling * tiles, npid0, tiles, a_ptr, {', '.join(own_args)}, "
            f"{', '.join(constants)})")
    members = ", ".join(k.name for k in siblings)
    source = (f"{preamble}\n\n\n{function}\n\n\n@triton.jit\ndef {name}({signature}):\n"
              f'    """{len(siblings)} products of one left operand in one launch: {members}"""\n'
              f"    pid0 = tl.program_id(0)\n    pid1 = tl.program_id(1)\n    npid0 = tl.num_programs(0)\n"
              f"    tiles = tl.cdiv(N, GRID_N)\n    sibling = pid1 // tiles\n" + "\n".join(branches) + "\n" + call + "\n")
    (m, m_name), (n, n_name) = first.grid
    return TritonKernel(name=name, source=source, args=("a_ptr", *ins, *outs), sizes=first.sizes,
                        grid=((m, m_name), (n * len(siblings), n_name)),
                        configs=_pointer_configs(first, int(sympy.sympify(n))))


def _outputs_of(kernel: TritonKernel) -> int:
    return sum(1 for a in kernel.args if a.startswith("out_ptr"))

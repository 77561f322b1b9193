"""Random valid tensor programs for differential testing of the whole pipeline.

A program is a list of steps over a growing list of values (the inputs first).
Each step names an op and the values it reads; `run_program` executes it with
torch, so the same program runs eagerly and, traced, through pipec. Shapes
include size-1 and odd dims; steps include broadcasts, views, reductions.
Hypothesis draws programs (and shrinks a failing one to a small repro).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from hypothesis import strategies as st

SIZES = (1, 2, 3, 5, 7, 8, 16)

UNARY = {
    "neg": torch.neg, "abs": torch.abs, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "gelu": torch.nn.functional.gelu, "gelu_tanh": lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
    "silu": torch.nn.functional.silu, "sin": torch.sin, "cos": torch.cos, "square": torch.square,
    "exp_soft": lambda x: torch.exp(torch.tanh(x)), "log_safe": lambda x: torch.log(x.abs() + 1),
    "sqrt_safe": lambda x: torch.sqrt(x.abs() + 0.5), "rsqrt_safe": lambda x: torch.rsqrt(x * x + 1),
    "recip_safe": lambda x: 1.0 / (x * x + 1), "affine": lambda x: x * 0.5 + 1.25, "floor": torch.floor,
    "clamp": lambda x: torch.clamp(x, -0.5, 0.75), "erf": torch.erf,
    # indexing through `take`: flip, a shift by constant padding, a roll by cat
    "flip": lambda x: x.flip(-1) if x.dim() else x,
    "pad_shift": lambda x: torch.nn.functional.pad(x, (1, 0), value=0.5)[..., :-1] if x.dim() else x,
    "roll_cat": lambda x: torch.cat([x[..., 1:], x[..., :1]], -1) if x.dim() else x,
}
BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "maximum": torch.maximum, "minimum": torch.minimum,
    "div_safe": lambda a, b: a / (b.abs() + 1), "where_gt": lambda a, b: torch.where(a > b, a, b),
    "pow2_add": lambda a, b: a * a + b,
}
REDUCE = {
    "sum": lambda x, d, k: x.sum(d, keepdim=k), "amax": lambda x, d, k: x.amax(d, keepdim=k),
    "amin": lambda x, d, k: x.amin(d, keepdim=k), "mean": lambda x, d, k: x.mean(d, keepdim=k),
    "var": lambda x, d, k: x.var(d, keepdim=k, unbiased=False),
}
ROW = {"softmax": lambda x, d: torch.softmax(x, d), "log_softmax": lambda x, d: torch.log_softmax(x, d)}


@dataclass(frozen=True)
class Step:
    op: str
    args: tuple[int, ...]  # indices of the values read
    params: tuple = ()

    def __str__(self) -> str:
        return f"{self.op}({', '.join(f'v{a}' for a in self.args)}{''.join(f', {p!r}' for p in self.params)})"


@dataclass(frozen=True)
class Program:
    input_shapes: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]

    def __str__(self) -> str:
        lines = [f"v{i} = input{list(s)}" for i, s in enumerate(self.input_shapes)]
        n = len(self.input_shapes)
        lines += [f"v{n + k} = {s}" for k, s in enumerate(self.steps)]
        lines.append(f"return {', '.join(f'v{o}' for o in self.outputs)}")
        return "\n".join(lines)


def apply_step(step: Step, values: list[torch.Tensor]) -> torch.Tensor:
    xs = [values[a] for a in step.args]
    op, p = step.op, step.params
    if op in UNARY:
        return UNARY[op](xs[0])
    if op in BINARY:
        return BINARY[op](xs[0], xs[1])
    if op in REDUCE:
        return REDUCE[op](xs[0], p[0], p[1])
    if op in ROW:
        return ROW[op](xs[0], p[0])
    if op == "permute":
        return xs[0].permute(*p)
    if op == "flatten":
        return xs[0].reshape(-1)
    if op == "merge":  # merge dims p[0], p[0]+1
        s = list(xs[0].shape)
        return xs[0].reshape(s[: p[0]] + [s[p[0]] * s[p[0] + 1]] + s[p[0] + 2:])
    if op == "unsqueeze_expand":
        return xs[0].unsqueeze(p[0]).expand(*[p[1] if d == p[0] else -1 for d in range(xs[0].dim() + 1)])
    if op == "slice":
        d, start, step = p
        return xs[0].narrow(d, 0, xs[0].shape[d])[(slice(None),) * d + (slice(start, None, step),)]
    if op == "select":
        return xs[0].select(p[0], p[1])
    if op == "contiguous_t":
        return xs[0].transpose(0, -1).contiguous()
    raise ValueError(f"unknown fuzz op {op}")


def run_program(prog: Program, inputs) -> tuple[torch.Tensor, ...]:
    values = list(inputs)
    for step in prog.steps:
        values.append(apply_step(step, values))
    return tuple(values[o] for o in prog.outputs)


def make_inputs(prog: Program, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g) for s in prog.input_shapes]


@st.composite
def programs(draw, min_steps: int = 2, max_steps: int = 30) -> Program:
    rank = draw(st.integers(1, 3))
    base = tuple(draw(st.sampled_from(SIZES)) for _ in range(rank))
    n_inputs = draw(st.integers(1, 3))
    shapes = [base]
    for _ in range(n_inputs - 1):  # broadcast-compatible variants of the base shape
        keep = draw(st.integers(0, rank))
        shape = tuple(1 if draw(st.booleans()) else s for s in base[rank - keep:]) if keep else ()
        shapes.append(shape or (base[-1],))
    shapes_now = [tuple(s) for s in shapes]
    steps: list[Step] = []
    n_steps = draw(st.integers(min_steps, max_steps))
    for _ in range(n_steps):
        step = draw(_step(shapes_now))
        if step is None:
            continue
        steps.append(step)
        shapes_now.append(_shape_after(step, shapes_now))
    if not steps:
        steps.append(Step("neg", (0,)))
        shapes_now.append(shapes_now[0])
    n = len(shapes)
    last = n + len(steps) - 1
    extra = draw(st.lists(st.integers(n, last), max_size=2, unique=True))
    outputs = tuple(dict.fromkeys([last, *extra]))
    return Program(tuple(shapes), tuple(steps), outputs)


def _shape_after(step: Step, shapes) -> tuple[int, ...]:
    fake = [torch.empty(s, device="meta") for s in shapes]
    return tuple(apply_step(step, fake).shape)


@st.composite
def _step(draw, shapes):
    idx = draw(st.integers(0, len(shapes) - 1))
    shape = shapes[idx]
    rank = len(shape)
    kind = draw(st.sampled_from(["unary", "unary", "binary", "binary", "reduce", "row", "view"]))
    if kind == "unary":
        return Step(draw(st.sampled_from(sorted(UNARY))), (idx,))
    if kind == "binary":
        partners = [j for j, s in enumerate(shapes) if _broadcastable(shape, s)]
        j = draw(st.sampled_from(partners))
        a, b = (idx, j) if draw(st.booleans()) else (j, idx)
        return Step(draw(st.sampled_from(sorted(BINARY))), (a, b))
    if rank == 0:
        return None
    if kind == "reduce":
        return Step(draw(st.sampled_from(sorted(REDUCE))), (idx,),
                    (draw(st.integers(0, rank - 1)), draw(st.booleans())))
    if kind == "row":
        return Step(draw(st.sampled_from(sorted(ROW))), (idx,), (draw(st.integers(0, rank - 1)),))
    view = draw(st.sampled_from(["permute", "flatten", "merge", "unsqueeze_expand", "slice", "select",
                                 "contiguous_t"]))
    if view == "permute":
        return Step("permute", (idx,), tuple(draw(st.permutations(range(rank)))))
    if view == "merge":
        return Step("merge", (idx,), (draw(st.integers(0, rank - 2)),)) if rank >= 2 else None
    if view == "unsqueeze_expand":
        return Step(view, (idx,), (draw(st.integers(0, rank)), draw(st.sampled_from((1, 3, 4))))) if rank < 4 else None
    if view == "slice":
        d = draw(st.integers(0, rank - 1))
        return Step(view, (idx,), (d, draw(st.integers(0, max(0, shape[d] - 1))), draw(st.integers(1, 2))))
    if view == "select":
        d = draw(st.integers(0, rank - 1))
        return Step(view, (idx,), (d, draw(st.integers(0, shape[d] - 1)))) if rank >= 2 else None
    return Step(view, (idx,))


def _broadcastable(a, b) -> bool:
    try:
        torch.broadcast_shapes(a, b)
        return True
    except RuntimeError:
        return False

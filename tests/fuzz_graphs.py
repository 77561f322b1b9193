"""Random valid tensor programs for differential testing of the whole pipeline.

A program is a list of steps over a growing list of values (the inputs first).
Each step names an op and the values it reads; `run_program` executes it with
torch, so the same program runs eagerly and, traced, through pipec. Shapes
include size-1 and odd dims; steps include broadcasts, views, reductions.
Hypothesis draws programs (and shrinks a failing one to a small repro).

Families (`FAMILIES`; `programs()` is the first, float32 pointwise/reduction graphs):
matmuls with epilogues (bias, activation, residual), half precision (bf16/fp16), training
(the inputs' gradients are compared too), tensor constants (`torch.tensor([...])` inside the
function), dynamic sizes (compiled with dynamic=True, called at 2-3 sizes), and chains of
views feeding reductions, gathers and scatters (index_add / scatter_add). Every program also
carries the fusion policies it is compiled with: presets, and `random:<seed>` (fuzz_pipeline's
RandomHeuristics, which merges legal pairs at random).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

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
# views the newer families chain (p: the params after the value)
MORE_VIEWS = {
    "transpose": lambda x, a, b: x.transpose(a, b),
    "split": lambda x, d, a: x.reshape(x.shape[:d] + (a, x.shape[d] // a) + x.shape[d + 1:]),
    "narrow": lambda x, d, start, length: x.narrow(d, start, length),
    "unsqueeze": lambda x, d: x.unsqueeze(d),
    "squeeze": lambda x, d: x.squeeze(d),
    "movedim": lambda x, a, b: x.movedim(a, b),
    "diagonal": lambda x, a, b: torch.diagonal(x, 0, a, b),
    "unfold": lambda x, d, size, step: x.unfold(d, size, step),
}
MATMULS = {
    "matmul": torch.matmul,
    "matmul_t": lambda a, b: a @ b.transpose(-1, -2),
    "linear": torch.nn.functional.linear,  # (x, w[, b]), w [N, K]
    "addmm": torch.addmm,  # (b, x, w)
}
# ops whose result jumps where its input crosses an integer: a half-precision input that eager
# and pipec round differently lands on either side, so the half families leave them out
DISCONTINUOUS = frozenset({"floor"})
EPILOGUE_UNARY = ("relu", "gelu", "gelu_tanh", "silu", "tanh", "sigmoid", "square", "abs", "neg", "affine")
# fp16 `tl.dot` runs right in Triton's interpreter, bf16 does not (issue 20, item 1): on the CPU,
# bf16 programs draw no matmuls until it does
CPU_DOT_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class Step:
    op: str
    args: tuple[int, ...]  # indices of the values read
    params: tuple = ()

    def __str__(self) -> str:
        return f"{self.op}({', '.join(f'v{a}' for a in self.args)}{''.join(f', {p!r}' for p in self.params)})"


PRESETS = ("none", "default", "aggressive")


@dataclass(frozen=True)
class Program:
    input_shapes: tuple[tuple[int, ...], ...]
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]
    dtype: str = "float32"  # of every input (and so of every value)
    train: bool = False  # also compare the inputs' gradients (through torch.compile's AOTAutograd)
    sizes: tuple[tuple[tuple[int, ...], ...], ...] = ()  # input shapes of further calls (dynamic=True)
    dynamo: bool = False  # through pipec.compile (Dynamo + AOTAutograd), not make_fx; implied by train/sizes
    policies: tuple[str, ...] = PRESETS  # fusion policies, "random:<seed>" for a random one

    def __str__(self) -> str:
        lines = [f"v{i} = input{list(s)}" for i, s in enumerate(self.input_shapes)]
        n = len(self.input_shapes)
        lines += [f"v{n + k} = {s}" for k, s in enumerate(self.steps)]
        lines.append(f"return {', '.join(f'v{o}' for o in self.outputs)}")
        how = [f"dtype={self.dtype}"] if self.dtype != "float32" else []
        how += ["train"] if self.train else []
        how += [f"then called with {[list(s) for s in shapes]}" for shapes in self.sizes]
        how += ["via pipec.compile"] if self.dynamo and not (self.train or self.sizes) else []
        how += [f"policies={list(self.policies)}"] if self.policies != PRESETS else []
        return "\n".join(lines + ([f"# {'; '.join(how)}"] if how else []))

    @property
    def through_dynamo(self) -> bool:
        return self.dynamo or self.train or bool(self.sizes)


def apply_step(step: Step, values: list[torch.Tensor], reference: bool = False) -> torch.Tensor:
    """`step`'s value; `reference` marks the eager run pipec is judged against (see scatter_add)."""
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
    if op in MORE_VIEWS:
        return MORE_VIEWS[op](xs[0], *p)
    if op in MATMULS:
        return MATMULS[op](*xs)
    if op == "const":  # x (op) a tensor constant broadcast along dim -1-p[1]: torch.tensor([...]) in forward
        how, axis, values = p
        c = torch.tensor(values, dtype=xs[0].dtype, device=xs[0].device)
        if c.dim():
            c = c.reshape((-1,) + (1,) * axis)
        return xs[0] * c if how == "mul" else xs[0] + c
    if op == "index_select_const":  # gather through a constant int64 index tensor
        d, idx = p
        return xs[0].index_select(d, torch.tensor(idx, device=xs[0].device))
    if op == "gather":  # x.gather(d, index), index[..., i, ...] = (i * mult + off) % x.shape[d]
        d, mult, off, length = p
        x = xs[0]
        shape = list(x.shape)
        shape[d] = length
        return x.gather(d, _positions(length, mult, off, x.shape[d], d, shape, x.device))
    if op in ("index_add", "scatter_add"):
        # into xs[0] (or zeros of xs[-1]'s shape with dim d of size `target` when there is one value):
        # positions (i * mult + off) % target, with duplicates (they add up)
        d, mult, off, alpha, target = p
        src = xs[-1]
        if len(xs) == 1:
            shape = list(src.shape)
            shape[d] = target
            base = src.new_zeros(shape)
        else:
            base = xs[0]
        n = base.shape[d]
        if op == "index_add":
            return base.index_add(d, _positions(src.shape[d], mult, off, n, 0, None, src.device), src, alpha=alpha)
        index = _positions(src.shape[d], mult, off, n, d, list(src.shape), src.device)
        if reference:
            # torch 2.13's CPU scatter_add misplaces values for some expanded (stride-0) indices,
            # e.g. index strides (1, 0, 0, 0, 1) over shape [1, 4, 12, 6, 1]: 216 of 1152 elements
            # outside the scattered column changed. The reference reads a materialized index.
            index = index.contiguous()
        return base.scatter_add(d, index, src * alpha)
    raise ValueError(f"unknown fuzz op {op}")


def _positions(length, mult, off, n, d, shape, device):
    """(arange(length) * mult + off) % n, placed along dim d of `shape` (expanded) when given."""
    idx = (torch.arange(length, device=device) * mult + off) % n
    if shape is None:
        return idx
    view = [1] * len(shape)
    view[d] = length
    return idx.reshape(view).expand(shape)


def run_program(prog: Program, inputs, reference: bool = False) -> tuple[torch.Tensor, ...]:
    values = list(inputs)
    for step in prog.steps:
        values.append(apply_step(step, values, reference))
    return tuple(values[o] for o in prog.outputs)


DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def make_inputs(prog: Program, seed: int, shapes=None) -> list[torch.Tensor]:
    """The program's inputs (or inputs of `shapes`, one of prog.sizes): normal samples in its dtype."""
    g = torch.Generator().manual_seed(seed)
    dtype = DTYPES[prog.dtype]
    return [torch.randn(s, generator=g).to(dtype) for s in (shapes or prog.input_shapes)]


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


# ---------------------------------------------------------------- the newer families

MM_SIZES = {"M": (1, 2, 5, 8, 16), "K": (1, 3, 8, 16, 32), "N": (1, 4, 8, 16)}
VIEW_SIZES = (1, 2, 3, 4, 6, 8, 12)  # composite sizes give `split` something to split
POLICY_CHOICES = ("aggressive", "default", "none", "random")


@dataclass(frozen=True)
class Menu:
    """What a family's steps may draw."""

    half: bool = False  # leave out DISCONTINUOUS ops
    matmul: bool = True
    scatter: bool = True
    consts: bool = True


def half_ok_for_matmul(dtype: str, device: str) -> bool:
    return device != "cpu" or dtype in CPU_DOT_DTYPES


@st.composite
def _policies(draw, count: int) -> tuple[str, ...]:
    names = draw(st.lists(st.sampled_from(POLICY_CHOICES), min_size=count, max_size=count, unique=True))
    return tuple(f"random:{draw(st.integers(0, 2 ** 16))}" if n == "random" else n for n in names)


@st.composite
def _floats(draw, n: int) -> tuple[float, ...]:
    """n values exact in bf16 and fp16 (quarters in [-2, 2])."""
    return tuple(draw(st.integers(-8, 8)) / 4 for _ in range(n))


@st.composite
def _view_step(draw, shape, idx):
    """One view of value `idx` (of `shape`): the classic ones and MORE_VIEWS; None when none fits."""
    rank = len(shape)
    names = ["permute", "flatten", "merge", "unsqueeze_expand", "slice", "select", "transpose", "split",
             "narrow", "unsqueeze", "squeeze", "movedim", "diagonal", "unfold"]
    view = draw(st.sampled_from(names))
    if view == "unsqueeze":
        return Step(view, (idx,), (draw(st.integers(0, rank)),)) if rank < 5 else None
    if rank == 0:
        return None
    d = draw(st.integers(0, rank - 1))
    if view == "permute":
        return Step(view, (idx,), tuple(draw(st.permutations(range(rank)))))
    if view == "flatten":
        return Step(view, (idx,))
    if view == "merge":
        return Step(view, (idx,), (min(d, rank - 2),)) if rank >= 2 else None
    if view == "unsqueeze_expand":
        return Step(view, (idx,), (draw(st.integers(0, rank)), draw(st.sampled_from((1, 3, 4))))) if rank < 4 else None
    if view == "slice":
        return Step(view, (idx,), (d, draw(st.integers(0, max(0, shape[d] - 1))), draw(st.integers(1, 3))))
    if view == "select":
        return Step(view, (idx,), (d, draw(st.integers(0, shape[d] - 1)))) if rank >= 2 else None
    if view in ("transpose", "movedim", "diagonal"):
        other = draw(st.integers(0, rank - 1))
        if view == "diagonal" and (other == d or rank < 2):
            return None
        return Step(view, (idx,), (d, other))
    if view == "split":
        factors = [a for a in range(2, shape[d]) if shape[d] % a == 0]
        return Step(view, (idx,), (d, draw(st.sampled_from(factors)))) if factors and rank < 5 else None
    if view == "narrow":
        start = draw(st.integers(0, max(0, shape[d] - 1)))
        return Step(view, (idx,), (d, start, draw(st.integers(min(1, shape[d] - start), shape[d] - start))))
    if view == "squeeze":
        ones = [k for k, s in enumerate(shape) if s == 1]
        return Step(view, (idx,), (draw(st.sampled_from(ones)),)) if ones else None
    size = draw(st.integers(1, shape[d]))  # unfold: windows of `size` every `step`
    return Step(view, (idx,), (d, size, draw(st.integers(1, 3)))) if rank < 4 else None


@st.composite
def _rich_steps(draw, shapes, menu: Menu, dtype: str, device: str) -> list[Step]:
    """A step (or a chain of views and its consumer) over values of `shapes`; [] when the draw
    does not fit."""
    idx = draw(st.integers(0, len(shapes) - 1))
    shape = shapes[idx]
    rank = len(shape)
    kinds = ["unary", "unary", "binary", "binary", "reduce", "row", "view", "chain"]
    kinds += ["const", "const", "const_index"] if menu.consts else []
    kinds += ["gather", "scatter", "scatter"] if menu.scatter else []
    kinds += ["matmul"] if menu.matmul and half_ok_for_matmul(dtype, device) else []
    kind = draw(st.sampled_from(kinds))
    if kind == "unary":
        ops = sorted(set(UNARY) - (DISCONTINUOUS if menu.half else set()))
        return [Step(draw(st.sampled_from(ops)), (idx,))]
    if kind == "binary":
        partners = [j for j, s in enumerate(shapes) if _broadcastable(shape, s)]
        j = draw(st.sampled_from(partners))
        a, b = (idx, j) if draw(st.booleans()) else (j, idx)
        return [Step(draw(st.sampled_from(sorted(BINARY))), (a, b))]
    if kind == "const":
        how = draw(st.sampled_from(("mul", "add")))
        if rank == 0 or draw(st.integers(0, 3)) == 0:  # a 0-d constant
            return [Step("const", (idx,), (how, 0, draw(_floats(1))[0]))]
        axis = draw(st.integers(0, min(rank, 2) - 1))
        n = shape[-1 - axis] if draw(st.integers(0, 3)) else 1
        return [Step("const", (idx,), (how, axis, draw(_floats(n))))]
    if kind == "matmul":
        return _matmul_step(draw, shapes, idx)
    if rank == 0:
        return []
    d = draw(st.integers(0, rank - 1))
    if kind == "reduce":
        return [Step(draw(st.sampled_from(sorted(REDUCE))), (idx,), (d, draw(st.booleans())))]
    if kind == "row":
        return [Step(draw(st.sampled_from(sorted(ROW))), (idx,), (d,))]
    if kind == "view":
        step = draw(_view_step(shape, idx))
        return [step] if step is not None else []
    if kind == "chain":  # 2-5 views of views, then what reads them: a reduction, a gather or scatter
        steps, now, at = [], list(shapes), idx
        for _ in range(draw(st.integers(2, 5))):
            step = draw(_view_step(now[at], at))
            if step is None:
                continue
            steps.append(step)
            now.append(_shape_after(step, now))
            at = len(now) - 1
        consumer = draw(st.sampled_from(("reduce", "row", "gather", "scatter", "binary") if menu.scatter
                                        else ("reduce", "row", "binary")))
        tail = _consumer(draw, now, at, consumer) if len(now[at]) else []
        return steps + tail
    if kind == "const_index":
        idx_values = tuple(draw(st.lists(st.integers(0, shape[d] - 1), min_size=1, max_size=6)))
        return [Step("index_select_const", (idx,), (d, idx_values))]
    return _consumer(draw, shapes, idx, kind)


def _consumer(draw, shapes, idx, kind) -> list[Step]:
    """A reduction, row op, gather, scatter or binary op reading value `idx`."""
    shape = shapes[idx]
    rank = len(shape)
    d = draw(st.integers(0, rank - 1))
    if kind == "reduce":
        return [Step(draw(st.sampled_from(sorted(REDUCE))), (idx,), (d, draw(st.booleans())))]
    if kind == "row":
        return [Step(draw(st.sampled_from(sorted(ROW))), (idx,), (d,))]
    if kind == "binary":
        partners = [j for j, s in enumerate(shapes) if _broadcastable(shape, s)]
        return [Step(draw(st.sampled_from(sorted(BINARY))), (idx, draw(st.sampled_from(partners))))]
    mult, off = draw(st.sampled_from((0, 1, 2, 3, 5))), draw(st.integers(0, 7))
    if kind == "gather":
        return [Step("gather", (idx,), (d, mult, off, draw(st.integers(1, 8))))]
    op = draw(st.sampled_from(("index_add", "scatter_add")))
    alpha = draw(st.sampled_from((1.0, 0.5, -2.0)))
    if op == "index_add":
        fits = [j for j, s in enumerate(shapes) if len(s) == rank and all(s[k] == shape[k] for k in range(rank) if k != d)]
    else:
        fits = [j for j, s in enumerate(shapes) if len(s) == rank and all(s[k] >= shape[k] for k in range(rank) if k != d)]
    if fits and draw(st.booleans()):
        return [Step(op, (draw(st.sampled_from(fits)), idx), (d, mult, off, alpha, 0))]
    return [Step(op, (idx,), (d, mult, off, alpha, draw(st.integers(1, 8))))]


def _matmul_step(draw, shapes, idx) -> list[Step]:
    """value `idx` times a value it can multiply: [.., K] @ [K, N], a batch [B, M, K] @ [B, K, N],
    or a @ b^T with b of a's shape (a score matrix)."""
    a = shapes[idx]
    if not a:
        return []
    rhs = [j for j, s in enumerate(shapes) if len(s) == 2 and s[0] == a[-1] and len(a) <= 3]
    rhs += [j for j, s in enumerate(shapes) if len(a) == 3 and len(s) == 3 and s[0] == a[0] and s[1] == a[2]]
    same = [j for j, s in enumerate(shapes) if len(a) >= 2 and s == a]
    choices = [("matmul", j) for j in rhs] + [("matmul_t", j) for j in same]
    if not choices:
        return []
    op, j = draw(st.sampled_from(choices))
    return [Step(op, (idx, j))]


def _finish(draw, shapes, steps, n_inputs, **fields) -> Program:
    """The Program of `steps` over inputs `shapes[:n_inputs]`: the last value and up to two more out."""
    if not steps:
        steps.append(Step("neg", (0,)))
    last = n_inputs + len(steps) - 1
    extra = draw(st.lists(st.integers(n_inputs, last), max_size=2, unique=True))
    outputs = tuple(dict.fromkeys([last, *extra]))
    return Program(tuple(shapes[:n_inputs]), tuple(steps), outputs, **fields)


def _grow(draw, shapes, steps, n_steps, menu, dtype, device) -> None:
    for _ in range(n_steps):
        for step in draw(_rich_steps(shapes, menu, dtype, device)):
            steps.append(step)
            shapes.append(_shape_after(step, shapes))


@st.composite
def _dtype(draw, half: bool | None) -> str:
    """float32, or (half=True) bf16/fp16, or (None) either."""
    if half is None:
        return draw(st.sampled_from(("float32", "float32", "bfloat16", "float16")))
    return draw(st.sampled_from(("bfloat16", "float16"))) if half else "float32"


@st.composite
def rich_programs(draw, device: str = "cpu", max_steps: int = 10, half: bool | None = False,
                  train: bool = False, dynamo: bool | None = None, n_policies: int = 2, menu: Menu | None = None):
    """Graphs drawing from every step kind (constants, chains of views, gathers, scatters, matmuls)."""
    dtype = draw(_dtype(half))
    menu = menu or Menu()
    menu = Menu(half=dtype != "float32", matmul=menu.matmul, scatter=menu.scatter, consts=menu.consts)
    rank = draw(st.integers(1, 3))
    base = tuple(draw(st.sampled_from(VIEW_SIZES)) for _ in range(rank))
    shapes = [base]
    for _ in range(draw(st.integers(0, 2))):
        keep = draw(st.integers(1, rank))
        shapes.append(tuple(1 if draw(st.booleans()) else s for s in base[rank - keep:]))
    n_inputs = len(shapes)
    steps: list[Step] = []
    _grow(draw, shapes, steps, draw(st.integers(1, max_steps)), menu, dtype, device)
    via_dynamo = draw(st.integers(0, 4)) == 0 if dynamo is None else dynamo
    return _finish(draw, shapes, steps, n_inputs, dtype=dtype, train=train, dynamo=via_dynamo,
                   policies=draw(_policies(n_policies)))


@st.composite
def matmul_programs(draw, device: str = "cpu", max_steps: int = 6, half: bool | None = None,
                    train: bool = False, n_policies: int = 2):
    """A matmul (x @ w, linear with or without a bias, addmm, batched) and its epilogue (bias,
    activations, a residual, a constant scale), then a few more steps of any kind."""
    dtype = draw(_dtype(half))
    if not half_ok_for_matmul(dtype, device):
        dtype = "float16"
    lead = draw(st.sampled_from(((), (2,), (3,))))
    m, k, n = (draw(st.sampled_from(MM_SIZES[d])) for d in "MKN")
    form = draw(st.sampled_from(("matmul", "linear", "linear_bias", "addmm", "bmm")))
    shapes = [lead + (m, k)]
    if form == "matmul":
        shapes.append((k, n))
        mm = Step("matmul", (0, 1))
    elif form == "bmm":
        shapes.append(lead[:1] + (k, n))
        mm = Step("matmul", (0, 1))
    elif form == "addmm" and not lead:
        shapes += [(k, n), (n,)]
        mm = Step("addmm", (2, 0, 1))
    else:
        shapes.append((n, k))
        if form == "linear_bias":
            shapes.append((n,))
        mm = Step("linear", tuple(range(len(shapes))))
    bias = len(shapes) if draw(st.booleans()) else None  # a separate bias added in the epilogue
    if bias is not None:
        shapes.append((n,))
    residual = len(shapes) if draw(st.booleans()) else None
    if residual is not None:
        shapes.append(lead + (m, n))
    n_inputs = len(shapes)
    steps = [mm]
    shapes.append(_shape_after(mm, shapes))
    for _ in range(draw(st.integers(0, 4))):  # the epilogue, on the latest value
        last = len(shapes) - 1
        what = draw(st.sampled_from(("act", "act", "bias", "residual", "scale")))
        if what == "act":
            step = Step(draw(st.sampled_from(EPILOGUE_UNARY)), (last,))
        elif what == "bias" and bias is not None:
            step = Step("add", (last, bias))
        elif what == "residual" and residual is not None:
            step = Step(draw(st.sampled_from(("add", "mul", "sub"))), (last, residual))
        elif what == "scale":
            step = Step("const", (last,), ("mul", 0, draw(_floats(shapes[last][-1]))))
        else:
            continue
        steps.append(step)
        shapes.append(_shape_after(step, shapes))
    menu = Menu(half=dtype != "float32")
    _grow(draw, shapes, steps, draw(st.integers(0, max_steps)), menu, dtype, device)
    return _finish(draw, shapes, steps, n_inputs, dtype=dtype, train=train, dynamo=train or draw(st.integers(0, 4)) == 0,
                   policies=draw(_policies(n_policies)))


def _runs(prog: Program, shapes) -> bool:
    """Whether eager runs `prog` on inputs of `shapes` (real CPU tensors, small: meta tensors do not
    check the values of an index, and a constant index may fall outside a smaller size)."""
    try:
        run_program(prog, [torch.zeros(s, dtype=DTYPES[prog.dtype]) for s in shapes])
        return True
    except Exception:  # noqa: BLE001 - any failure: these sizes do not fit the program
        return False


@st.composite
def dynamic_programs(draw, device: str = "cpu", base=None):
    """A program compiled with dynamic=True and called at 2-3 sizes: one size of the first call
    (every input dim of that size) changes between calls; changes that eager rejects are dropped."""
    prog = draw(base if base is not None else st.one_of(rich_programs(device, half=None, n_policies=1),
                                                        matmul_programs(device, n_policies=1)))
    sizes = sorted({d for s in prog.input_shapes for d in s if d >= 2})
    if not sizes:
        return replace(prog, dynamo=True)
    v = draw(st.sampled_from(sizes))
    news = draw(st.lists(st.sampled_from((v + 1, 2 * v + 1, v + 3, max(2, v - 1))), min_size=1, max_size=2,
                         unique=True))
    variants = [tuple(tuple(n if d == v else d for d in s) for s in prog.input_shapes) for n in news if n != v]
    return replace(prog, sizes=tuple(var for var in variants if _runs(prog, var)), dynamo=True)


@st.composite
def training_programs(draw, device: str = "cpu"):
    """Forward and backward compiled: the inputs' gradients are compared with eager's."""
    base = draw(st.one_of(rich_programs(device, half=None, n_policies=1, max_steps=8),
                          matmul_programs(device, n_policies=1, max_steps=4)))
    return replace(base, train=True, dynamo=True)


@st.composite
def view_chain_programs(draw, device: str = "cpu"):
    """An input through a chain of 2-6 views (reshape, slice, permute, transpose, ...), then a
    reduction, gather or scatter of the result, then a few more steps."""
    rank = draw(st.integers(2, 4))
    shapes = [tuple(draw(st.sampled_from(VIEW_SIZES)) for _ in range(rank))]
    steps: list[Step] = []
    at = 0
    for _ in range(draw(st.integers(2, 6))):
        step = draw(_view_step(shapes[at], at))
        if step is None:
            continue
        steps.append(step)
        shapes.append(_shape_after(step, shapes))
        at = len(shapes) - 1
    if shapes[at]:
        for step in _consumer(draw, shapes, at, draw(st.sampled_from(("reduce", "gather", "scatter", "row")))):
            steps.append(step)
            shapes.append(_shape_after(step, shapes))
    _grow(draw, shapes, steps, draw(st.integers(0, 4)), Menu(matmul=False), "float32", device)
    return _finish(draw, shapes, steps, 1, dynamo=draw(st.integers(0, 4)) == 0, policies=draw(_policies(2)))


@st.composite
def constant_programs(draw, device: str = "cpu"):
    """Tensor constants in the function (`torch.tensor([...])`, float and int64 indices), through
    pipec.compile about half of the time."""
    prog = draw(rich_programs(device, half=None, dynamo=draw(st.booleans()), max_steps=6))
    shapes = [*prog.input_shapes]
    for step in prog.steps:
        shapes.append(_shape_after(step, shapes))
    idx = draw(st.integers(0, len(shapes) - 1))
    shape = shapes[idx]
    if shape and draw(st.booleans()):
        d = draw(st.integers(0, len(shape) - 1))
        extra = Step("index_select_const", (idx,), (d, tuple(draw(st.lists(st.integers(0, shape[d] - 1),
                                                                             min_size=1, max_size=5)))))
    else:
        extra = Step("const", (idx,), ("add", 0, draw(_floats(shape[-1] if shape else 1))))
    n = len(prog.input_shapes) + len(prog.steps)
    return replace(prog, steps=prog.steps + (extra,), outputs=tuple(dict.fromkeys((n, *prog.outputs))))


def families(device: str = "cpu") -> dict:
    """name -> strategy of every family (scripts/fuzz.py --family)."""
    return {
        "classic": programs(),
        "matmul": matmul_programs(device),
        "half": st.one_of(rich_programs(device, half=True), matmul_programs(device, half=True)),
        "train": training_programs(device),
        "constants": constant_programs(device),
        "dynamic": dynamic_programs(device),
        "views": view_chain_programs(device),
        "mixed": rich_programs(device, half=None, max_steps=14, n_policies=2),
    }


def features(prog: Program) -> list[str]:
    """What a program exercises, for the fuzzer's tally (a program counts under each)."""
    ops = {s.op for s in prog.steps}
    found = [name for name, hit in (
        ("matmul", ops & set(MATMULS)),
        ("half", prog.dtype != "float32"),
        ("train", prog.train),
        ("dynamic", prog.sizes),
        ("constant", ops & {"const", "index_select_const"}),
        ("gather", ops & {"gather", "index_select_const"}),
        ("scatter", ops & {"index_add", "scatter_add"}),
        ("views", ops & set(MORE_VIEWS)),
        ("random_policy", any(p.startswith("random:") for p in prog.policies)),
        ("aggressive", "aggressive" in prog.policies),
    ) if hit]
    return found + ["pipec.compile" if prog.through_dynamo else "make_fx"]

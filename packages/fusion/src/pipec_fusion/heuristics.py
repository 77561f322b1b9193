"""Profitability: should two legal groups be one kernel? (Legality is `legality.py`.)

A `Heuristics` sees only `GroupInfo`s — small frozen descriptions of the two
groups — and the kind of merge:

- "vertical": `first` produces values `second` reads, every node still computed once
  per point of its own level (pointwise chains, prologue into / epilogue after a
  reduction, reductions sharing their input shape and dims).
- "recompute": vertical, but some producer value is evaluated at other indices than
  its own (broadcast into a larger consumer domain, or read through a permute/slice):
  codegen recomputes it per consumer element.
- "horizontal": independent groups (no path between them) with the same domain.

A pair where one group is a `matmul` is an *epilogue* merge (legality has checked
that the pointwise side runs over the product's domain): the product is then never
written and read back; codegen offers a Triton GEMM template with the epilogue on
its accumulator tile and cuBLAS + one pointwise kernel, and the runtime times both.

`score` returns a float (higher merges first) or None for "do not fuse";
`why_not` words the rejection recorded in the plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from pipec_ir.ops import CREATION_OPS

# Cheap ops: a stored value made only of these may be recomputed by its readers
# (`recompute_stored`), and they, with the square roots and reciprocals below, are what policy
# 'default' recomputes per element of a broadcast consumer over a much smaller domain (a
# layer_norm weight's cast to fp32, a bias scaled). Reading the small input again is an L1/L2
# hit; its own kernel would cost a launch.
CHEAP_RECOMPUTE_OPS = frozenset({"identity", "cast", "neg", "add", "sub", "mul", "abs"})
# A per-channel chain broadcast over a large domain may also take a square root or a reciprocal:
# an inference batch norm's scale, weight / sqrt(running_var + eps), is 5 such ops over C values.
# As a kernel of its own it was 53 launches of ~1.2 us in ResNet-50's call (H100, session 39),
# each a host launch in default mode; per element of a memory-bound reader it is a few ALU ops.
BROADCAST_RECOMPUTE_OPS = CHEAP_RECOMPUTE_OPS | {"sqrt", "rsqrt", "reciprocal"}
BROADCAST_RECOMPUTE_MAX_OPS = 6
CHEAP_RECOMPUTE_RATIO = 16  # the consumer's domain is at least this many times larger
# A pointwise value read only by a few-times-larger pointwise consumer (a broadcast, such as
# grouped-query attention's repeat_kv expanding 2 key/value heads to 14) is computed there instead
# of stored: its kernel and the intermediate's write and reads go. Legality only lets the merge
# happen when nothing else reads the value (it could not be stored from the larger domain).
# Each consumer element evaluates the chain once, so the bound is on the chain's ops per element
# (a rotary embedding: ~25) and on the factor (the value's inputs are read that many times more).
BROADCAST_RECOMPUTE_MAX_WORK = 40
BROADCAST_RECOMPUTE_MAX_FACTOR = 8
# A stored value another kernel reads is computed again there when it takes at most this many
# of those ops and reads no more bytes than the value (recompute_stored.py).
RECOMPUTE_STORED_MAX_OPS = 8
# A GEMM epilogue merge scores below every plain vertical merge, so pointwise chains first join
# each other and any reduction they feed: a residual add after a Linear then goes into the next
# LayerNorm (which reads the product and the residual, and writes the sum it needs anyway), not
# into the GEMM, where it became a kernel of its own whenever cuBLAS beat the Triton template
# (an extra pass in the GPT-2 block, which Inductor fuses into LayerNorm: docs/performance.md,
# "A GEMM epilogue scores below plain vertical merges"). A chain no reduction takes still ends
# up in the epilogue.
EPILOGUE_SCORE = 0.95
# What policy 'default' puts in a GEMM epilogue: bias, activations, residual, scaling, casts
# (cheap per element next to the K-long dot product; no libdevice calls, which slow the tile).
EPILOGUE_OPS = frozenset({
    "identity", "cast", "add", "sub", "mul", "div", "neg", "relu", "gelu", "silu", "sigmoid", "tanh",
    "maximum", "minimum", "where", "full", "iota", "square", "abs", "exp", "erf",
})


@dataclass(frozen=True)
class GroupInfo:
    """What a `Heuristics` sees of one candidate group (a would-be kernel): frozen, no graph access.

    `kind`: "pointwise", "reduction", "matmul" or "extern" (a reduction group may hold pointwise
    prologue and epilogue nodes; a matmul group its epilogue). `nodes`: the computing (non-view)
    node names in topological order; `ops`: their pipec ops (pipec_ir.OPS), same order.
    `domain`: the group's iteration domain, sympy size expressions (the output shape, or the
    input shape of a reduction); `reduce_dims`: the reduced dimensions of that domain, () if none.
    `numel`: the number of domain points with every size symbol replaced by its hint, for
    comparing sizes without sympy.
    """

    kind: str
    nodes: tuple[str, ...]
    ops: tuple[str, ...]
    domain: tuple
    reduce_dims: tuple[int, ...]
    numel: int

    @cached_property
    def work(self) -> int:
        """The computing ops: literals and iotas (CREATION_OPS) are constants and index expressions
        in a kernel, not work. Counted once per group: the merger scores each group against its
        every neighbour (BERT base's backward, `aggressive`: ~100k scores, 0.05 s of 1.7)."""
        return sum(op not in CREATION_OPS for op in self.ops)


class Heuristics:
    """Profitability of fusion: subclass it and override `score` (and `why_not` for readable rejections).

    `name` is the policy's one name: `pipec_fusion.fusion_from_heuristics(h)` makes it a fusion
    stage of that name, which a plugin registers with `registry.add_fusion(stage.name, stage)`;
    rejections and `KernelPlan.policy` use it too. `horizontal = True` asks the engine for
    horizontal candidates as well (each group with the HORIZONTAL_WINDOW nearest groups of its
    bucket, engine.py); `horizontal_scalars = True` asks for them only between groups of a 0-d
    domain. The engine merges the best-scoring legal pair first, then asks again about the
    merged group's new pairs. It may ask about a pair before checking its legality
    (a vertical pair as "vertical" and as "recompute", the kind legality will say), so `score`
    must be a pure function of its arguments; an illegal pair is never merged.
    """

    name = "custom"
    horizontal = False  # propose horizontal candidates at all
    horizontal_scalars = False  # propose them between 0-d groups only (implied by `horizontal`)

    def score(self, first: GroupInfo, second: GroupInfo, kind: str) -> float | None:
        """How much merging `first` and `second` into one kernel is worth, or None for "do not fuse".

        `kind` is "vertical", "recompute" or "horizontal" (the module docstring says what each
        means); for "vertical" and "recompute", `first` produces values `second` reads. Higher
        scores merge first; the value has no unit beyond that order. A None is recorded in
        `KernelPlan.rejected` with the reason `why_not` gives. Must be deterministic (the plan
        is cached by its input's digest). The base class fuses nothing.
        """
        return None

    def why_not(self, first: GroupInfo, second: GroupInfo, kind: str) -> str:
        """The reason recorded for a pair `score` refused, starting with "heuristics: "."""
        return f"heuristics: policy {self.name!r} does not fuse this {kind} pair"

    def recompute_stored(self, ops: tuple[str, ...], read_bytes: int, stored_bytes: int) -> bool:
        """A kernel stores a value only for another kernel to read: should that kernel compute it
        again (`ops`, reading `read_bytes` per element) instead of reading it (`stored_bytes`)?
        See recompute_stored.py. The base class never does."""
        return False


class NoFusion(Heuristics):
    """Every computing node is its own kernel."""

    name = "none"

    def score(self, first, second, kind):
        return None

    def why_not(self, first, second, kind):
        return "heuristics: policy 'none' does not fuse"


def epilogue_pair(first: GroupInfo, second: GroupInfo) -> tuple[GroupInfo, GroupInfo] | None:
    """(matmul group, pointwise group) when the pair is an epilogue merge, else None."""
    if first.kind == "matmul" and second.kind != "matmul":
        return first, second
    if second.kind == "matmul" and first.kind != "matmul":
        return second, first
    return None


def few_times_broadcast(first: GroupInfo, second: GroupInfo) -> bool:
    """`first`, a pointwise chain of modest work, is read by pointwise `second` over a larger
    domain, at most BROADCAST_RECOMPUTE_MAX_FACTOR times larger (grouped-query attention's
    key/value heads repeated for the query heads). A read at other indices over a domain no
    larger (a transpose) is not one: it is left as it was."""
    return (first.kind == "pointwise" and second.kind == "pointwise"
            and first.work <= BROADCAST_RECOMPUTE_MAX_WORK
            and first.numel < second.numel <= first.numel * BROADCAST_RECOMPUTE_MAX_FACTOR)


def cheap_broadcast(first: GroupInfo, second: GroupInfo) -> bool:
    """`first` is a short chain of cheap pointwise ops over a domain much smaller than
    `second`'s (a per-channel parameter broadcast over rows). Literals and iotas count as no op,
    as in `work`: a nearest upsample's source index (iota, + 0.5 as a literal, x scale as
    another, cast) is three ops, and counting its literals kept it a kernel of its own, after
    recompute_stored had offered it and cost a fusion pass (SD 1.5: 6 such, a third pass)."""
    return (first.kind == "pointwise" and first.work <= BROADCAST_RECOMPUTE_MAX_OPS
            and all(op in BROADCAST_RECOMPUTE_OPS or op in CREATION_OPS for op in first.ops)
            and first.numel * CHEAP_RECOMPUTE_RATIO <= second.numel)


def gathers_into_column_reduction(first: GroupInfo, second: GroupInfo) -> bool:
    """One group gathers (`take`: reads at computed indices, as a max pool's backward does over
    its windows) and the other reduces over the leading dimension and keeps a later one, as a
    batch norm's per-channel sums over [N, H, W] do. Merged, the gathers run in the reduction's
    programs, one per kept row (64 channels: 64 programs): ResNet-50's pool backward took 3.2 ms
    that way on the H200, against 0.38 ms as a kernel of its own before the sums."""
    # spelled out, without a generator: the merger asks this of every pair it scores
    return ((_column_reduction(first) and "take" in second.ops)
            or (_column_reduction(second) and "take" in first.ops))


def _column_reduction(g: GroupInfo) -> bool:
    """A reduction over the leading dimension keeping a later one."""
    return g.kind == "reduction" and 0 in g.reduce_dims and len(g.reduce_dims) < len(g.domain)


class DefaultHeuristics(Heuristics):
    """Vertical producer -> consumer fusion; no recomputation except of literals, of cheap
    casts/arithmetic on small broadcast inputs (`cheap_broadcast`) and of modest chains read
    only by a few-times-larger broadcast (`few_times_broadcast`); GEMM epilogues of up to
    `max_epilogue_ops` ops from EPILOGUE_OPS."""

    name = "default"
    # independent 0-d kernels are launches with nothing to compute: an optimizer step's count per
    # parameter (`step += 1`, stored as state) is one each, so AdamW's compiled step launched two
    # kernels per parameter; merged, the counts are one kernel
    horizontal_scalars = True
    max_ops = 64
    max_epilogue_ops = 16
    epilogue_ops: frozenset | None = EPILOGUE_OPS  # None: any pointwise op

    def _too_big(self, first, second) -> bool:
        """More than `max_ops` computing ops: literals and iotas are constants and index
        expressions in the kernel, not work (a cat's gathers are mostly those: a partial rotary
        embedding's two cats, computed in one kernel, hold 70 nodes and 36 ops)."""
        return first.work + second.work > self.max_ops

    def _epilogue_problem(self, first, second) -> str | None:
        mm, other = epilogue_pair(first, second)
        ops = [op for op in mm.ops + other.ops if op not in ("mm", "bmm")]
        if len(ops) > self.max_epilogue_ops:
            return f"matmul epilogue would hold more than {self.max_epilogue_ops} ops"
        if self.epilogue_ops is not None:
            odd = sorted(set(ops) - self.epilogue_ops)
            if odd:
                return (f"policy {self.name!r} keeps {', '.join(odd)} out of matmul epilogues "
                        "(policy 'aggressive' does not)")
        return None

    def score(self, first, second, kind):
        if self._too_big(first, second) or gathers_into_column_reduction(first, second):
            return None
        epilogue = epilogue_pair(first, second)
        if epilogue and self._epilogue_problem(first, second):
            return None
        if kind == "vertical":  # the intermediate is neither written nor read back
            return EPILOGUE_SCORE if epilogue else 1.0 + float(first.numel)
        if kind == "horizontal" and first.domain == () and second.domain == ():
            return 0.5  # after every vertical merge: one launch for independent scalar work
        if kind == "recompute" and all(op in CREATION_OPS for op in first.ops):
            return 1.0  # a literal or iota costs nothing to recompute
        if kind == "recompute" and cheap_broadcast(first, second):
            return 0.9
        if kind == "recompute" and few_times_broadcast(first, second):
            return 0.8
        return None

    def recompute_stored(self, ops, read_bytes, stored_bytes):
        """A short chain of cheap ops that reads no more bytes than the stored value: the reader
        computes it again, and the store goes when nothing else reads it."""
        return (len(ops) <= RECOMPUTE_STORED_MAX_OPS and read_bytes <= stored_bytes
                and all(op in CHEAP_RECOMPUTE_OPS or op in CREATION_OPS for op in ops))

    def why_not(self, first, second, kind):
        if self._too_big(first, second):
            return f"heuristics: kernel would hold more than {self.max_ops} ops"
        if gathers_into_column_reduction(first, second):
            return "heuristics: gathers would run in the order of a reduction over leading dimensions"
        problem = epilogue_pair(first, second) and self._epilogue_problem(first, second)
        if problem:
            return f"heuristics: {problem}"
        if kind == "recompute":
            return (f"heuristics: policy {self.name!r} does not recompute {first.nodes[-1]} per element of "
                    f"{second.nodes[0]}'s domain (policy 'aggressive' does)")
        if kind == "horizontal":
            return f"heuristics: policy {self.name!r} fuses independent kernels only where both are 0-d"
        return super().why_not(first, second, kind)


class AggressiveHeuristics(DefaultHeuristics):
    """Default, plus recomputation by broadcast, horizontal fusion of same-domain groups,
    and GEMM epilogues of any pointwise ops (up to 64)."""

    name = "aggressive"
    horizontal = True
    max_ops = 128
    max_epilogue_ops = 64
    epilogue_ops = None

    def score(self, first, second, kind):
        if self._too_big(first, second) or gathers_into_column_reduction(first, second):
            return None
        epilogue = epilogue_pair(first, second)
        if epilogue and self._epilogue_problem(first, second):
            return None
        if kind == "vertical":
            return EPILOGUE_SCORE if epilogue else 1.0 + float(first.numel)
        if kind == "recompute":
            return 0.75  # after every plain vertical fusion
        if kind == "horizontal":
            return 0.5  # last: one launch instead of two
        return None


# The built-in policies, by their `name`.
PRESETS: dict[str, type[Heuristics]] = {h.name: h for h in (NoFusion, DefaultHeuristics, AggressiveHeuristics)}

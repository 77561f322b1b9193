"""`GraphAnalysis`: the facts about a Graph that grouping and legality read.

Views are transparent here: every value has a *root* (itself for a graph input or
a computing node, the root of its input for a view), and a node "reads" the roots
of its inputs. Index arithmetic through a view chain is `pipec_ir.indexing`.
"""

from __future__ import annotations

from collections import defaultdict

import sympy
from pipec_ir import Graph, Node, kind_of
from pipec_ir.indexing import refine_shapes, view_source_index
from pipec_ir.ops import VIEW_OPS
from pipec_ir.symbolic import index_symbol, size_symbol


def group_kind_of(node: Node) -> str:
    """The kind of group a (non-view) node starts in."""
    kind = kind_of(node.op)
    if node.op == "scatter":  # writes at data-dependent positions: a kernel kind of its own
        return "scatter"
    if kind in ("pointwise", "creation", "indexing"):  # indexing: `take`, a pointwise gather
        return "pointwise"
    if kind in ("reduction", "matmul", "extern", "scan", "collective"):  # collective: never fused
        return kind
    raise ValueError(f"fusion: node {node.name} has op {node.op!r} of kind {kind!r}, which fusion cannot place")


def index_vars(shape) -> tuple[sympy.Expr, ...]:
    """The index of a point of `shape`: (i0, i1, ...), with 0 for dims of size 1."""
    return tuple(sympy.Integer(0) if size == 1 else index_symbol(f"i{k}") for k, size in enumerate(shape))


def shape_str(shape) -> str:
    return "[" + ", ".join(str(s) for s in shape) + "]"


def _equal(x, y) -> bool:
    """x == y as sizes or index expressions; two different numbers are told apart without sympy
    (legality compares shapes ~100k times for BERT base: expanding Integer differences was a
    third of fusion's time)."""
    if x == y:
        return True
    if isinstance(x, (int, sympy.Integer)) and isinstance(y, (int, sympy.Integer)):
        return False
    return sympy.expand(x - y) == 0


def same_shape(a, b) -> bool:
    """Equal shapes (or, as `same_index`, equal indices: both are tuples of size expressions)."""
    if a == b:  # element-wise ==: most shapes compared are identical numbers or symbols
        return True
    return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))


same_index = same_shape


def _views_of_strided_results(graph: Graph, nodes: dict[str, Node]) -> frozenset[str]:
    """The view nodes whose source is an extern result the capture marked `strided`."""
    def strided(value: str) -> bool:
        n = nodes.get(value)
        if n is None:
            return False
        if n.op == "getitem":
            source = nodes.get(n.inputs[0])
            return source is not None and n.attr("index") in (source.attr("strided") or ())
        return n.op == "extern" and 0 in (n.attr("strided") or ())

    return frozenset(n.name for n in graph.nodes if n.op in VIEW_OPS and strided(n.inputs[0]))


class GraphAnalysis:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: dict[str, Node] = graph.node_map()
        self.types = graph.types()
        self.input_names = {i.name for i in graph.inputs}
        order = [i.name for i in graph.inputs] + [n.name for n in graph.nodes]
        self.position = {name: k for k, name in enumerate(order)}

        self._index_cache: dict = {}
        self._symbols_cache: dict[tuple, frozenset] = {}
        self._numel_cache: dict[tuple, int] = {}  # shape -> numel_hint
        self._refine_cache: dict[tuple, tuple | None] = {}  # (shape, shape) -> refine_shapes
        self._hints = {size_symbol(s.name): s.hint for s in graph.symbols}
        # views read straight off a library result laid out other than row-major (the capture's
        # `strided` hint): each is made by its view call and read by kernels as a tensor of its
        # own, not folded into their index math, since folding would have the runtime copy the
        # result row-major first (BERT training: attention's gradients, two copies each)
        self.materialized = _views_of_strided_results(graph, self.nodes)
        self.root: dict[str, str] = {i.name: i.name for i in graph.inputs}
        # the node computing a value, through every view (materialized ones too): what a reader
        # of the value depends on, for the group graph
        self.source: dict[str, str] = dict(self.root)
        for n in graph.nodes:
            folds = n.op in VIEW_OPS and n.name not in self.materialized
            self.root[n.name] = self.root[n.inputs[0]] if folds else n.name
            self.source[n.name] = self.source[n.inputs[0]] if n.op in VIEW_OPS else n.name

        self.live = self._live_nodes()
        # compute nodes: live nodes that are not views
        self.compute = [n.name for n in graph.nodes if n.name in self.live and n.op not in VIEW_OPS]
        # externs drawing from torch's generator (attr `seeded`), in graph order: they keep that
        # order whatever is merged around them (`seeded_order`), or each would draw another's numbers
        self.seeded = [name for name in self.compute
                       if self.nodes[name].op == "extern" and self.nodes[name].attr("seeded")]

        # root -> non-view live nodes reading it (directly or through views), in graph order
        readers: dict[str, list[str]] = defaultdict(list)
        for name in self.compute:
            for v in self.nodes[name].inputs:
                r = self.root[v]
                if name not in readers[r]:
                    readers[r].append(name)
        self.readers = dict(readers)

        # views that must exist as tensors: read by a library call, or returned
        need: set[str] = set()
        for name in self.compute:
            n = self.nodes[name]
            if group_kind_of(n) in ("matmul", "extern", "collective") and n.op != "getitem":
                need.update(v for v in n.inputs if self.is_view(v))
        need.update(o for o in graph.results() if self.is_view(o))
        need.update(v for v in self.materialized if v in self.live)
        stack = list(need)
        while stack:
            v = self.nodes[stack.pop()].inputs[0]
            if self.is_view(v) and v not in need:
                need.add(v)
                stack.append(v)
        self.view_kernels = sorted(need, key=self.position.__getitem__)

        # roots that must be stored whatever the grouping: graph outputs and sources of view kernels
        self.forced_store = {self.root[o] for o in graph.results()}  # outputs and written values
        self.forced_store.update(self.root[v] for v in need)
        self.forced_store -= self.input_names

    # ------------------------------------------------------------ helpers

    def seeded_order(self) -> list[tuple[str, str]]:
        """(earlier, later) for each two successive seeded externs: an ordering edge, as if the
        later read the earlier, in the fusion DAG and the plan's schedule."""
        return list(zip(self.seeded, self.seeded[1:]))

    def is_view(self, value: str) -> bool:
        """Is `value` a view folded into its readers' index math (a materialized view is not)?"""
        n = self.nodes.get(value)
        return n is not None and n.op in VIEW_OPS and value not in self.materialized

    def shape(self, value: str):
        return tuple(self.types[value].shape)

    def pos(self, value: str) -> int:
        return self.position[value]

    def view_chain(self, value: str) -> list[str]:
        """The view nodes from `value` back to (not including) its root."""
        chain = []
        while self.is_view(value):
            chain.append(value)
            value = self.nodes[value].inputs[0]
        return chain

    def map_index(self, value: str, index: tuple) -> tuple[str, tuple]:
        """(root, index into the root) for reading `value` at `index`."""
        key = (value, index)
        if key not in self._index_cache:
            self._index_cache[key] = self._map_index(value, index)
        return self._index_cache[key]

    def _map_index(self, value, index):
        while self.is_view(value):
            node = self.nodes[value]
            index = view_source_index(node, index, self.types[node.inputs[0]])
            value = node.inputs[0]
        return value, tuple(index)

    def index_symbols(self, index: tuple) -> frozenset:
        """The symbols an index (a tuple of expressions) uses, once per index (legality asks for
        each candidate's every member)."""
        found = self._symbols_cache.get(index)
        if found is None:
            found = self._symbols_cache[index] = frozenset().union(*(sympy.sympify(i).free_symbols for i in index))
        return found

    def must_store(self, name: str, members) -> bool:
        """Is computing node `name` stored by a kernel holding exactly `members`?"""
        if name in self.forced_store:
            return True
        return any(r not in members for r in self.readers.get(name, ()))

    def refine(self, a: tuple, b: tuple) -> tuple | None:
        """`refine_shapes(a, b)`, once per pair of shapes (a matmul group's legality refines
        every member's shape against the product's at each check: 5 s of a 16-layer Llama's fusion)."""
        key = (tuple(a), tuple(b))
        if key not in self._refine_cache:
            self._refine_cache[key] = refine_shapes(*key)
        return self._refine_cache[key]

    def numel_hint(self, shape) -> int:
        key = tuple(shape)
        if key not in self._numel_cache:
            self._numel_cache[key] = self._numel_hint(key)
        return self._numel_cache[key]

    def _numel_hint(self, shape) -> int:
        total = sympy.Mul(*shape) if shape else sympy.Integer(1)
        total = total.subs(self._hints)
        if total.free_symbols:
            total = total.subs({s: 64 for s in total.free_symbols})
        try:
            return int(total)
        except TypeError:
            return 0

    def _live_nodes(self) -> set[str]:
        live: set[str] = set()
        stack = [o for o in self.graph.results() if o in self.nodes]
        for n in self.graph.nodes:  # library calls and collectives run whatever happens to their results
            if n.op in ("extern", "getitem") or kind_of(n.op) == "collective":
                stack.append(n.name)
        while stack:
            name = stack.pop()
            if name in live:
                continue
            live.add(name)
            stack.extend(v for v in self.nodes[name].inputs if v in self.nodes)
        return live


def changed_nodes(old: GraphAnalysis, new: GraphAnalysis) -> frozenset[str] | None:
    """The computing nodes of `new` whose facts may differ from `old`'s, or None when the two
    graphs differ beyond such nodes (their inputs, symbols or the order of common nodes).

    A node's facts are what legality and profitability read of a group member: its node, the
    views and root each input reads through, its readers, whether it is stored whatever its
    group, and its place among the others. The recompute pass's rewrite (recompute_stored.py)
    copies a few nodes under new names and rewires their readers, keeping every other node
    object: a node is unchanged when it, its inputs' view chains and roots are the same objects
    and its readers and forced store are the same."""
    if old.graph.inputs != new.graph.inputs or old.graph.symbols != new.graph.symbols:
        return None
    common = [old.position[n] for n in new.position if n in old.position]
    if any(a >= b for a, b in zip(common, common[1:])):
        return None
    return frozenset(name for name in new.compute if not _same_facts(old, new, name))


def _same_facts(old: GraphAnalysis, new: GraphAnalysis, name: str) -> bool:
    node = new.nodes[name]
    if old.nodes.get(name) is not node or name not in old.live:
        return False
    if (name in old.forced_store) != (name in new.forced_store):
        return False
    if set(old.readers.get(name, ())) != set(new.readers.get(name, ())):
        return False
    for value in node.inputs:
        chain = new.view_chain(value)
        if chain != old.view_chain(value) or any(old.nodes[v] is not new.nodes[v] for v in chain):
            return False
        root = new.root[value]
        if old.root.get(value) != root or (root in new.nodes and old.nodes.get(root) is not new.nodes[root]):
            return False
    return True

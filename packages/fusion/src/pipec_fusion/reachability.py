"""Which groups reach which, kept up to date while groups merge.

The greedy merger asks after every merge whether a pair has a path between (a horizontal
merge would close a cycle) or a detour (a vertical merge would). Recomputing reachability
over the whole group DAG per merge made fusion quadratic: most of a 24-layer decoder's
fusion time (docs/performance.md, "Fusion time"). Merging two groups only adds paths through
the merged group, so the sets are updated in place instead: the ancestors of the merged
group now reach everything it reaches, and those descendants are reached by its ancestors.

Sets are bitsets (Python ints) indexed by group id: bit g of `descendants[x]` is set when a
path x -> ... -> g exists.
"""

from __future__ import annotations

import networkx as nx


def _bits(mask: int):
    """The indices of the set bits of `mask`. Read from its binary text: peeling the lowest bit
    off a 3,000-bit int makes two new ints per bit, which was half of a Llama's reachability
    updates."""
    text = bin(mask)[:1:-1]  # bit k is text[k]
    k = text.find("1")
    while k != -1:
        yield k
        k = text.find("1", k + 1)


class Reachability:
    def __init__(self, dag: nx.DiGraph):
        self.descendants: dict[int, int] = {}
        self.ancestors: dict[int, int] = {}
        order = list(nx.topological_sort(dag))
        for g in reversed(order):
            bits = 0
            for s in dag.successors(g):
                bits |= self.descendants[s] | (1 << s)
            self.descendants[g] = bits
        for g in order:
            bits = 0
            for p in dag.predecessors(g):
                bits |= self.ancestors[p] | (1 << p)
            self.ancestors[g] = bits

    def reaches(self, x: int, y: int) -> bool:
        return bool((self.descendants[x] >> y) & 1)

    def related(self, x: int, y: int) -> bool:
        """A path one way or the other."""
        return self.reaches(x, y) or self.reaches(y, x)

    def merge(self, a: int, b: int, keep: int) -> None:
        """Groups a and b became one group `keep` (one of them); the other id is gone."""
        gone = b if keep == a else a
        pair = (1 << a) | (1 << b)
        below = (self.descendants[a] | self.descendants[b]) & ~pair
        above = (self.ancestors[a] | self.ancestors[b]) & ~pair
        del self.descendants[gone], self.ancestors[gone]
        self.descendants[keep], self.ancestors[keep] = below, above
        clear, add_below, add_above = ~(1 << gone), below | (1 << keep), above | (1 << keep)
        for x in _bits(above):
            self.descendants[x] = (self.descendants[x] & clear) | add_below
        for y in _bits(below):
            self.ancestors[y] = (self.ancestors[y] & clear) | add_above

"""Which groups reach which, kept up to date while groups merge.

The greedy merger asks after every merge whether a pair has a path between (a horizontal
merge would close a cycle) or a detour (a vertical merge would). Recomputing reachability
over the whole group DAG per merge made fusion quadratic: most of a 24-layer decoder's
fusion time (docs/performance.md, "Fusion time"). Merging two groups only adds paths through
the merged group, so the sets are updated in place instead: the ancestors of the merged
group now reach everything it reaches, and those descendants are reached by its ancestors.

Sets are bitsets (Python ints) indexed by group id: bit g of `descendants[x]` is set when a
path x -> ... -> g exists. A merged-away id's bit may stay set in other groups' sets (`live`
says which ids still exist): clearing it meant rewriting every ancestor's and descendant's set
on every merge, although a group that reached both halves already reaches everything the merged
group does. Only the groups that reached (or were reached by) one half alone are updated.
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
        self.live = sum(1 << g for g in dag.nodes)  # the ids of the groups that exist
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

    def between(self, a: int, b: int) -> int | None:
        """The smallest id of a group on a path between a and b, either way, or None: what
        `legality.cycle_through` answers from the DAG, whose two graph searches per rejected pair
        were most of fusion's time under policy `none` (BERT base's forward: 1,451 pairs, 1.2 s
        of 1.4)."""
        on_path = (self.descendants[a] & self.ancestors[b]) | (self.descendants[b] & self.ancestors[a])
        on_path &= self.live & ~((1 << a) | (1 << b))  # a merged-away id's bit may linger: `live`
        return (on_path & -on_path).bit_length() - 1 if on_path else None

    def merge(self, a: int, b: int, keep: int) -> None:
        """Groups a and b became one group `keep` (one of them); the other id is gone."""
        gone = b if keep == a else a
        self.live &= ~(1 << gone)
        others = self.live & ~(1 << keep)
        da, db, aa, ab = self.descendants[a], self.descendants[b], self.ancestors[a], self.ancestors[b]
        below, above = (da | db) & others, (aa | ab) & others
        del self.descendants[gone], self.ancestors[gone]
        self.descendants[keep], self.ancestors[keep] = below, above
        # A group above both halves reaches all of `below` and `keep` already: only those above
        # one half gain paths (and likewise below). One above half b alone reaches b and b's
        # descendants already (the sets are closed), so it gains a's other descendants, and
        # `keep` when that is a: nothing at all when b was a's only way on and b is kept (a
        # chain's merge), where adding below | keep to every such group was most of the time.
        kept_a, kept_b = (1 << keep if keep == a else 0), (1 << keep if keep == b else 0)
        self._gain(self.descendants, ab & ~aa & others, (da & ~db & others) | kept_a)
        self._gain(self.descendants, aa & ~ab & others, (db & ~da & others) | kept_b)
        self._gain(self.ancestors, db & ~da & others, (aa & ~ab & others) | kept_a)
        self._gain(self.ancestors, da & ~db & others, (ab & ~aa & others) | kept_b)

    @staticmethod
    def _gain(sets: dict[int, int], groups: int, bits: int) -> None:
        """Add `bits` to the set of every group in `groups`."""
        if bits:
            for g in _bits(groups):
                sets[g] |= bits

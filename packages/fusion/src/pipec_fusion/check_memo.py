"""Legality results shared by the passes of one `fuse_graph` call.

The recompute pass (recompute_stored.py) fuses the graph a second time after copying a few
cheap values next to their readers, and nearly every group the second pass checks was
checked, member for member, by the first (BERT base: 2,279 of 2,326); `check_group` was about
two thirds of fusion's time. A group's legality depends only on its kind, domain and reduced
dims and, per member in graph order, on the member's node, the view chain and root each of its
inputs reads through, its readers and whether it must be stored: `CheckMemo.key` is exactly
that, with nodes compared by identity. The passes share the Node objects the rewrite left
alone (it makes new ones for copies and rewired readers, under fresh names), and the memo
holds every node it has seen, so an identity is never reused while the memo lives.
"""

from __future__ import annotations

from .analysis import GraphAnalysis
from .legality import Group, GroupCheck, check_group


class CheckMemo:
    def __init__(self) -> None:
        self.results: dict[tuple, GroupCheck] = {}
        self._tokens: dict[int, tuple[object, int]] = {}  # id(node) -> (the node, kept alive; its token)
        self.hits = 0

    def token(self, node) -> int:
        found = self._tokens.get(id(node))
        if found is None:
            found = self._tokens[id(node)] = (node, len(self._tokens))
        return found[1]

    def check(self, an: GraphAnalysis, group: Group, member_keys: dict) -> GroupCheck:
        """`check_group(an, group)`, from the memo when an earlier pass checked the same group.
        `member_keys`: the analysis's own cache of member keys (one per pass)."""
        key = self.key(an, group, member_keys)
        result = self.results.get(key)
        if result is None:
            result = self.results[key] = check_group(an, group)
        else:
            self.hits += 1
        return result

    def key(self, an: GraphAnalysis, group: Group, member_keys: dict) -> tuple:
        members = []
        for name in sorted(group.members, key=an.pos):
            found = member_keys.get(name)
            if found is None:
                node = an.nodes[name]
                found = member_keys[name] = (self.token(node), tuple(self._value_key(an, v) for v in node.inputs),
                                             frozenset(an.readers.get(name, ())), name in an.forced_store)
            members.append(found)
        return group.kind, tuple(group.domain), tuple(group.reduce_dims), tuple(members)

    def _value_key(self, an: GraphAnalysis, value: str) -> tuple:
        chain = tuple(self.token(an.nodes[v]) for v in an.view_chain(value))
        root = an.nodes.get(an.root[value])  # None for a graph input: its name stands for it
        return chain, (self.token(root) if root is not None else an.root[value])

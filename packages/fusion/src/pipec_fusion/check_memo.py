"""Legality results shared by the repeated layers of a model, and by the passes of one
`fuse_graph` call.

A group's legality (`check_group`) depends only on its kind, domain and reduced dims and, per
member in graph order, on the member's op and type (and a reduction's or scan's attributes), on
the view chain and root each of its inputs reads through (which member the root is, if any), and
on whether the member must be stored. Nothing else of the graph enters, so two groups alike in
those facts have the same result up to their members' names.

`CheckMemo.shape_key` is those facts without names. The first group of a structure is checked;
its result is kept with member names replaced by their positions in the group (`_Template`), and
every later group of that structure gets it under its own names:
* the twelve layers of a BERT check twelve copies of each group (a 12-layer BERT of width 64:
  1568 groups checked, 197 of them by `check_group`);
* the recompute pass (recompute_stored.py) fuses the graph a second time after copying a few
  cheap values next to their readers, and nearly every group it checks was checked by the first.

Scatter groups (scatter_legality.py) are checked every time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipec_ir import kind_of

from .analysis import GraphAnalysis
from .legality import Group, GroupCheck, check_group
from .scatter_legality import SCATTER


@dataclass(frozen=True)
class _Template:
    """A GroupCheck with member names replaced by their positions in the group's graph order."""
    reason: tuple | None  # the reason's text split around member names: str, int, str, int, ...
    recomputed: tuple[int, ...]

    @staticmethod
    def of(result: GroupCheck, ordered: list[str]) -> _Template:
        local = {name: k for k, name in enumerate(ordered)}
        reason = None
        if result.reason is not None:
            parts = _split_names(result.reason, local)  # text, name, text, name, ..., text
            reason = tuple(local[p] if k % 2 else p for k, p in enumerate(parts))
        return _Template(reason, tuple(sorted(local[n] for n in result.recomputed)))

    def bind(self, ordered: list[str]) -> GroupCheck:
        reason = None
        if self.reason is not None:
            reason = "".join(ordered[p] if k % 2 else p for k, p in enumerate(self.reason))
        return GroupCheck(reason, frozenset(ordered[k] for k in self.recomputed))


_WORDS = re.compile(r"(\w+)")


def _split_names(text: str, names) -> list[str]:
    """`text` split around the whole-word occurrences of `names`: [text, name, text, ..., text].

    Names made of word characters only (all of the capture's) are the runs of word characters
    that are names: one fixed pattern. Any other name needs a pattern of its own, the names
    longest first as whole words (`add_1` never matches inside `add_12`); compiling that
    alternation of every member's name for each refused group took 0.38 s of BERT base's
    backward `aggressive` fusion (2.7 s), this 0.03 s."""
    if all(_WORDS.fullmatch(n) for n in names):
        parts = [""]
        for k, piece in enumerate(_WORDS.split(text)):  # text, word, text, word, ..., text
            if k % 2 and piece in names:
                parts += [piece, ""]
            else:
                parts[-1] += piece
        return parts
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return pattern.split(text)


# kinds whose attributes `check_group` never reads (it reads a reduction's dims and keepdim, a
# scan's dim, and views through their chains)
_ATTRS_UNREAD = ("pointwise", "creation")


class CheckMemo:
    def __init__(self) -> None:
        self.shapes: dict[tuple, _Template] = {}
        self._interned: dict[tuple, int] = {}  # facts of a member (or a domain) -> a token
        self.hits = 0  # groups whose result came from the memo

    def check(self, an: GraphAnalysis, group: Group, member_keys: dict) -> GroupCheck:
        """`check_group(an, group)`, from the memo when this pass or an earlier one checked a
        group of the same structure. `member_keys`: the pass's own cache of per-member facts
        (one dict per pass: the analysis they come from changes between passes)."""
        if group.kind == SCATTER:
            return check_group(an, group)
        ordered = sorted(group.members, key=an.pos)
        key = self.shape_key(an, group, ordered, member_keys)
        template = self.shapes.get(key)
        if template is None:
            result = check_group(an, group)
            self.shapes[key] = _Template.of(result, ordered)
            return result
        self.hits += 1
        return template.bind(ordered)

    def shape_key(self, an: GraphAnalysis, group: Group, ordered: list[str], member_keys: dict) -> tuple:
        """The group's facts that legality reads, without names: per member its op, type and
        attributes, per input the views it reads through and its root (the member's position in
        the group, or its type when outside), and whether the member must be stored."""
        local = {name: k for k, name in enumerate(ordered)}
        inside = group.members
        members = []
        for name in ordered:
            found = member_keys.get(name)
            if found is None:
                found = member_keys[name] = self._member_shape(an, name)
            token, roots, readers, forced = found
            # stored: `an.must_store`, with the readers as a set (this runs for every member of
            # every group checked: a third of fusion's time before the results it saves)
            members.append((token, tuple([local.get(root, -1) for root in roots]), forced or not readers <= inside))
        return group.kind, self._intern((tuple(group.domain), tuple(group.reduce_dims))), tuple(members)

    def _member_shape(self, an: GraphAnalysis, name: str) -> tuple[int, tuple[str, ...], frozenset, bool]:
        """(a token for the member's own facts, the roots of its inputs, its readers, whether it
        is stored whatever its group): the group's key is then tuples of small ints, where
        hashing the types' sympy sizes at every lookup cost as much as the checks it saved."""
        node = an.nodes[name]
        reads = tuple((tuple((an.nodes[v].op, an.nodes[v].type, an.nodes[v].attrs) for v in an.view_chain(value)),
                       an.types[an.root[value]]) for value in node.inputs)
        # legality reads no attribute of a pointwise or creation node (a literal's value, a cast's
        # dtype, dropout's Philox offset, which differs in every layer), only their shapes
        attrs = () if kind_of(node.op) in _ATTRS_UNREAD else node.attrs
        return (self._intern((node.op, node.type, attrs, reads)), tuple(an.root[v] for v in node.inputs),
                frozenset(an.readers.get(name, ())), name in an.forced_store)

    def _intern(self, facts: tuple) -> int:
        found = self._interned.get(facts)
        if found is None:
            found = self._interned[facts] = len(self._interned)
        return found

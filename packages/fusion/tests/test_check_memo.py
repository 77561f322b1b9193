"""check_memo.py: legality found once for a group is given to every group of the same structure
(a model's repeated layers), under that group's own names."""

from fusion_graphs import GraphBuilder
from pipec_ir import CompileOptions

from pipec_fusion import engine, preset


def _layers(n: int = 4):
    """Each layer gathers from a cast of its own input (rotary tables): a take's source must come
    from memory, so fusing the cast into the gather is refused, in every layer."""
    g = GraphBuilder("layers")
    idx = g.input("idx", [16, 64], "int64")
    outs = []
    for k in range(n):
        xf = g.node("cast", (g.input(f"x{k}", [16, 64], "bfloat16"),), [16, 64], name=f"xf{k}")
        s = g.reduce("sum", xf, (1,), keepdim=True)
        outs.append(g.pw("mul", g.node("take", (xf, idx), [16, 64], name=f"taken{k}"), g.expand(s, [16, 64])))
    return g.build(*outs)


def test_repeated_layers_share_results_and_refusals_name_their_own_nodes(monkeypatch, check_memos):
    graph = _layers()
    plan = preset("default").fuse(graph, CompileOptions())
    (memo,) = check_memos
    assert memo.hits > len(memo.shapes)  # the middle layers reuse the first one's checks
    for k in range(4):
        reasons = [r.reason for r in plan.rejected if "data-dependent" in r.reason and f"xf{k} " in r.reason]
        assert reasons and all(r.startswith(f"taken{k} reads xf{k} ") for r in reasons), plan.rejected
    monkeypatch.setattr(engine, "CheckMemo", lambda: None)  # every group checked on its own
    assert plan == preset("default").fuse(graph, CompileOptions())


def test_a_reason_keeps_names_that_contain_each_other():
    """`add_1` must not be rewritten inside `add_12`: names are replaced as whole words."""
    from pipec_fusion.check_memo import _Template
    from pipec_fusion.legality import GroupCheck

    ordered = ["add_1", "add_12"]
    template = _Template.of(GroupCheck("add_12 reads add_1 twice", frozenset({"add_1"})), ordered)
    bound = template.bind(["mul_3", "mul_30"])
    assert bound == GroupCheck("mul_30 reads mul_3 twice", frozenset({"mul_3"}))


def test_names_are_split_out_of_a_reason_as_whole_words_whatever_their_characters():
    """Word-character names go by the fixed pattern, others by a pattern of their own: both split
    as `\\b(longest name first|...)\\b` does."""
    from pipec_fusion.check_memo import _split_names

    text = "add_1 reads add_12, x.y and x.yz (add_1)"
    assert _split_names(text, {"add_1": 0, "add_12": 1}) == ["", "add_1", " reads ", "add_12", ", x.y and x.yz (",
                                                               "add_1", ")"]
    assert _split_names(text, {"x.y": 0, "add_1": 1}) == ["", "add_1", " reads add_12, ", "x.y", " and x.yz (",
                                                          "add_1", ")"]
    assert _split_names("no names here", {"a_1": 0}) == ["no names here"]

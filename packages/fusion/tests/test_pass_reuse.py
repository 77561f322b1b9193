"""The recompute pass takes from the pass before it what that pass found about groups the
rewrite left alone (engine `_State.reusable`, analysis `changed_nodes`)."""

import pytest
from pipec_ir import CompileOptions
from test_recompute_stored import layer_norm_backward

from pipec_fusion import engine, preset
from pipec_fusion.analysis import GraphAnalysis, changed_nodes
from pipec_fusion.legality import GroupCheck, check_group
from pipec_fusion.recompute_stored import find_candidates, rewrite

OPTS = CompileOptions()


def _first_pass(graph, policy="default"):
    heuristics = preset(policy).heuristics
    state = engine._fuse_once(graph, heuristics).state
    return state, find_candidates(state.an, state.groups, state.owner, heuristics)


def test_changed_nodes_are_the_copies_their_readers_and_the_values_they_no_longer_read():
    graph = layer_norm_backward()
    state, candidates = _first_pass(graph)
    assert candidates
    rewritten, copies = rewrite(graph, state.an, candidates)
    an = GraphAnalysis(rewritten)
    changed = changed_nodes(state.an, an)
    for cand in candidates:
        assert copies[cand] in changed  # new
        assert set(cand.readers) <= changed  # rewired to the copy
        # fewer readers: stored for fewer kernels (or read by none: in no group)
        assert cand.value in changed or cand.value not in an.compute
    assert set(an.compute) - changed  # the rest is as it was


def test_nothing_is_reused_across_graphs_that_differ_in_their_inputs():
    graph = layer_norm_backward()
    other = layer_norm_backward(grad_dtype="float32")  # same names, other input types
    assert changed_nodes(GraphAnalysis(graph), GraphAnalysis(other)) is None
    assert changed_nodes(GraphAnalysis(graph), GraphAnalysis(graph)) == frozenset()


@pytest.mark.parametrize("policy", ["default", "aggressive"])
@pytest.mark.parametrize("extra", [None, "add", "sub"])
def test_plans_are_those_of_passes_that_check_and_score_everything(monkeypatch, policy, extra):
    graph = layer_norm_backward(extra=extra)
    reused = preset(policy).fuse(graph, OPTS)
    assert reused.graph is not graph  # the recompute pass ran
    monkeypatch.setattr(engine, "REUSE_EARLIER_PASS", False)
    assert reused == preset(policy).fuse(graph, OPTS)


def _passes(monkeypatch) -> list:
    """The passes (`engine._Pass`) of the fusions in this test."""
    passes, real = [], engine._fuse_once
    monkeypatch.setattr(engine, "_fuse_once", lambda *a, **k: passes.append(real(*a, **k)) or passes[-1])
    return passes


def _stale_entries(state) -> list:
    """What the pass holds (reused or found) that a pass finding everything afresh disagrees with."""
    fresh = engine._State(state.an)
    stale = [g for g, found in state._checks.items() if found != check_group(state.an, g)]
    stale += [g for g, found in state._infos.items() if found != fresh.info(g)]
    stale += [key for key, found in state.statics.items() if found != engine._static_uncached(fresh, *key)]
    return stale


@pytest.mark.parametrize("policy", ["default", "aggressive"])
def test_every_reused_result_is_what_the_pass_would_find(monkeypatch, policy):
    passes = _passes(monkeypatch)
    preset(policy).fuse(layer_norm_backward(), OPTS)
    assert len(passes) >= 2 and passes[1].state.changed
    for one in passes:
        assert _stale_entries(one.state) == []


def _poison(state, touching) -> None:
    """Refuse, in the pass's caches, every group (and pair) with a member in `touching`."""
    def poisoned(*groups) -> bool:
        return any(not g.members.isdisjoint(touching) for g in groups)

    for g in state._checks:
        if poisoned(g):
            state._checks[g] = GroupCheck("poisoned")
    for key in state.statics:
        if poisoned(key[0], key[1]):
            state.statics[key] = ("poisoned", None, None)
    for key in state.scores:
        if poisoned(key[0], key[1]):
            state.scores[key] = None


@pytest.mark.parametrize("policy", ["default", "aggressive"])
def test_the_second_pass_takes_only_unchanged_groups_from_the_first(policy):
    """Poisoning what the first pass found about changed groups leaves the second pass's plan as
    it is; poisoning every group does not (the results are reused: a stale one would show)."""
    graph = layer_norm_backward()
    heuristics = preset(policy).heuristics
    state, candidates = _first_pass(graph, policy)
    rewritten, _ = rewrite(graph, state.an, candidates)
    want = engine._plan_of(engine._fuse_once(rewritten, heuristics), policy)
    _poison(state, changed_nodes(state.an, GraphAnalysis(rewritten)))
    assert engine._plan_of(engine._fuse_once(rewritten, heuristics, earlier=state), policy) == want
    _poison(state, set(state.an.compute))
    assert engine._plan_of(engine._fuse_once(rewritten, heuristics, earlier=state), policy) != want

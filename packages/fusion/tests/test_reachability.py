"""Reachability kept up to date through merges equals reachability recomputed from scratch."""

import random

import networkx as nx
import pytest

from pipec_fusion.reachability import Reachability


def _contract(dag: nx.DiGraph, a: int, b: int, keep: int) -> None:
    gone = b if keep == a else a
    for p in list(dag.predecessors(gone)):
        if p != keep:
            dag.add_edge(p, keep)
    for s in list(dag.successors(gone)):
        if s != keep:
            dag.add_edge(keep, s)
    dag.remove_node(gone)


def _fresh(dag: nx.DiGraph) -> dict[int, set[int]]:
    return {g: set(nx.descendants(dag, g)) for g in dag}


def _random_dag(rng: random.Random, n: int) -> nx.DiGraph:
    """n groups, each fed by up to three earlier ones."""
    dag = nx.DiGraph()
    dag.add_nodes_from(range(n))
    for b in range(n):
        for a in rng.sample(range(b), min(b, rng.randint(0, 3))):
            dag.add_edge(a, b)
    return dag


@pytest.mark.parametrize("seed", range(6))
def test_merges_keep_reachability_exact(seed):
    rng = random.Random(seed)
    dag = _random_dag(rng, 40)
    reach = Reachability(dag)
    merges = 0
    while merges < 25:
        a, b = sorted(rng.sample(sorted(dag), 2))
        if dag.has_edge(a, b):  # vertical: legal only without a detour
            if any(s != b and nx.has_path(dag, s, b) for s in dag.successors(a)):
                continue
        elif nx.has_path(dag, a, b) or nx.has_path(dag, b, a):  # horizontal: unrelated only
            continue
        keep = rng.choice((a, b))
        _contract(dag, a, b, keep)
        reach.merge(a, b, keep)
        merges += 1
        want = _fresh(dag)
        for x in dag:
            for y in dag:
                assert reach.reaches(x, y) == (y in want[x]), (x, y)
                assert bool((reach.ancestors[y] >> x) & 1) == (y in want[x]), (x, y)


@pytest.mark.parametrize("seed", range(4))
def test_between_is_cycle_through(seed):
    """`between` (the rejections' cycle check, from the bitsets) names the group `cycle_through`
    finds by searching the DAG, after merges too."""
    from pipec_fusion.legality import cycle_through

    rng = random.Random(seed)
    dag = _random_dag(rng, 30)
    reach = Reachability(dag)
    for _ in range(12):
        a, b = sorted(rng.sample(sorted(dag), 2))
        if dag.has_edge(a, b) and not any(s != b and nx.has_path(dag, s, b) for s in dag.successors(a)):
            keep = rng.choice((a, b))
            _contract(dag, a, b, keep)
            reach.merge(a, b, keep)
        for x in dag:
            for y in dag:
                if x < y:
                    assert reach.between(x, y) == cycle_through(dag, x, y), (x, y)

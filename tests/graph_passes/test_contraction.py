"""Contraction.closes_cycle agrees with contracting the graph and asking networkx."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from hexfuse.graph_passes.select.contraction import Contraction


def _quotient_is_acyclic(successors, groups) -> bool:
    rep = list(range(len(successors)))
    for g, members in enumerate(groups):
        for unit in members:
            rep[unit] = len(successors) + g
    graph = nx.DiGraph()
    graph.add_nodes_from(set(rep))
    graph.add_edges_from((rep[u], rep[s]) for u, targets in enumerate(successors) for s in targets if rep[u] != rep[s])
    return nx.is_directed_acyclic_graph(graph)


@pytest.mark.parametrize("seed", range(200))
def test_closes_cycle_matches_networkx(seed):
    rng = np.random.default_rng(seed)
    count = 40
    successors = [sorted({int(t) for t in rng.integers(u + 1, min(count, u + 8), size=rng.integers(0, 3))}) if u < count - 1 else [] for u in range(count)]
    predecessors = [[u for u in range(count) if v in successors[u]] for v in range(count)]
    contraction = Contraction(successors, predecessors)
    groups: list[list[int]] = []
    free = set(range(count))
    decisions = 0
    for _ in range(30):
        if len(free) < 2:
            break
        members = [int(u) for u in rng.choice(sorted(free), size=2, replace=False)]
        expected_cycle = not _quotient_is_acyclic(successors, groups + [members])
        assert contraction.closes_cycle(members) == expected_cycle, (seed, groups, members)
        decisions += 1
        if not expected_cycle:
            contraction.add(members)
            groups.append(members)
            free -= set(members)
    assert decisions >= 10


def _predecessors(successors):
    return [[u for u in range(len(successors)) if v in successors[u]] for v in range(len(successors))]


def test_a_path_that_climbs_past_the_group_and_comes_back_through_two_groups_is_seen():
    # 0 -> 16 -> 21 =H1= 11 -> 12 =H2= 2 -> 10: contracting G = {0, 10} closes G -> H1 -> H2 -> G, although
    # the path climbs to 21, past max(G) plus the widest group's span (a bound on positions misses it)
    successors = [[] for _ in range(22)]
    for a, b in [(0, 16), (16, 21), (11, 12), (2, 10)]:
        successors[a].append(b)
    contraction = Contraction(successors, _predecessors(successors))
    for group in ([11, 21], [2, 12]):
        assert not contraction.closes_cycle(group)
        contraction.add(group)
    assert contraction.closes_cycle([0, 10])
    assert not _quotient_is_acyclic(successors, [[11, 21], [2, 12], [0, 10]])


def test_adding_a_group_that_closes_a_cycle_is_refused():
    successors = [[1], [], [3], []]
    contraction = Contraction(successors, _predecessors(successors))
    contraction.add([0, 3])
    with pytest.raises(ValueError):
        contraction.add([1, 2])

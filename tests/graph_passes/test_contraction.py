"""Contraction.closes_cycle agrees with contracting the graph and asking networkx."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from hexfuse.graph_passes.contraction import Contraction


def _quotient_is_acyclic(successors, groups) -> bool:
    rep = list(range(len(successors)))
    for g, members in enumerate(groups):
        for unit in members:
            rep[unit] = len(successors) + g
    graph = nx.DiGraph()
    graph.add_nodes_from(set(rep))
    graph.add_edges_from((rep[u], rep[s]) for u, targets in enumerate(successors) for s in targets if rep[u] != rep[s])
    return nx.is_directed_acyclic_graph(graph)


@pytest.mark.parametrize("seed", range(20))
def test_closes_cycle_matches_networkx(seed):
    rng = np.random.default_rng(seed)
    count = 40
    successors = [sorted({int(t) for t in rng.integers(u + 1, min(count, u + 8), size=rng.integers(0, 3))}) if u < count - 1 else [] for u in range(count)]
    contraction = Contraction(successors)
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

"""Windowed reachability agrees with networkx on random DAGs, and says UNKNOWN past the window."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from hexfuse.graph_passes.analysis.reach import Reach, Reachability


def _random_dag(count: int, seed: int, span: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    successors: list[list[int]] = [[] for _ in range(count)]
    for node in range(count - 1):
        for target in sorted(set(rng.integers(node + 1, min(count, node + 1 + span), size=rng.integers(0, 3)))):
            successors[node].append(int(target))
    return successors


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("window", [4, 16, 512])
def test_reaches_matches_networkx(seed, window):
    successors = _random_dag(120, seed, span=12)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(120))
    graph.add_edges_from((a, b) for a, targets in enumerate(successors) for b in targets)
    reach = Reachability(successors, window=window)
    for source in range(120):
        truth = nx.descendants(graph, source)
        for target in range(120):
            answer = reach.reaches(source, target)
            if target <= source:
                assert answer is Reach.NO
            elif target - source > window:
                assert answer is Reach.UNKNOWN
            else:
                assert (answer is Reach.YES) == (target in truth), (source, target)


def test_first_path_finds_a_witness_or_none():
    successors = [[1], [2], [], [4], []]  # 0->1->2, 3->4
    reach = Reachability(successors, window=8)
    assert reach.first_path([0], [2]) == (0, 2, Reach.YES)
    assert reach.first_path([0, 1], [3, 4]) is None
    assert reach.first_path([3], [0, 1, 2]) is None
    far = Reachability([[1], [], [], []], window=1)
    assert far.first_path([0], [3]) == (0, 3, Reach.UNKNOWN)

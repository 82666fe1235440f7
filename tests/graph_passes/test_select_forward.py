"""The contracted graph's forward-edge test (select/groups.py ``_forward``, array processing) against its
definition walked edge by edge: with each group in the place of its first unit, every edge between
different groups (or from a unit in none) goes forward. Groups here are disjoint task sets chosen at
random, so both answers occur."""

from __future__ import annotations

import random

import pytest

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.load.model import load_model
from hexfuse.graph_passes.select.balance import Verdict
from hexfuse.graph_passes.select.groups import Group, _forward
from tests.builders import bundled_or_lm


def _walked(analysis: Analysis, groups: list[Group]) -> bool:
    place = list(range(len(analysis.units)))
    member = [-1] * len(analysis.units)
    for g, group in enumerate(groups):
        units = [unit for task in group.tasks for unit in task.units]
        for unit in units:
            place[unit], member[unit] = min(units), g
    return all(place[unit] < place[target]
               for unit, targets in enumerate(analysis.units.successors) for target in targets
               if member[unit] != member[target] or member[unit] < 0)


@pytest.mark.parametrize("name", ["gptj_block_qdq", "llama_prefill_decode", "googlenet", "lm"])
def test_forward_agrees_with_the_edge_walk(name, tmp_path):
    loaded = load_model(bundled_or_lm(tmp_path, name))
    analysis = Analysis.of(loaded.model, typed=loaded.inferred.graph)
    tasks = [task for task in analysis.tasks if task.fusable]
    verdict = Verdict(True, 0.5, "test", {})
    rng = random.Random(3)
    answers = set()
    for trial in range(200):
        # groups of two or three tasks close to each other (far apart, nearly every edge goes forward)
        start = rng.randrange(len(tasks))
        near = tasks[start:start + 12]
        chosen = rng.sample(near, min(len(near), 3 * rng.randint(0, 3)))
        size = rng.choice((2, 3))
        groups = [Group(tuple(sorted(chosen[i:i + size], key=lambda t: t.lo)), verdict)
                  for i in range(0, len(chosen), size)]
        expected = _walked(analysis, groups)
        assert _forward(analysis, groups) is expected, (trial, groups)
        answers.add(expected)
    assert answers == {True, False}

"""Choose which candidate groups to fuse: the best-scoring disjoint pairs, extended to triples, kept
only while the whole graph stays acyclic.

    candidates ──score──> accepted pairs ──greedy by gain──> disjoint pairs ──+third engine──> groups
                                                                  └── drop worst group on a cycle ──┘

Contracting two groups that are each convex can still close a cycle between them (a in G1 feeds b
in G2 while c in G2 feeds d in G1), so the quotient graph is checked once all groups are chosen and
the lowest-gain group of any cycle is dropped until none is left.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx

from graph_passes.analysis import Analysis
from graph_passes.balance import Scorer, Verdict
from graph_passes.candidates import Candidates, independence_problem
from graph_passes.spec_builder import fused_op_spec
from graph_passes.tasks import Task


@dataclass(frozen=True)
class Group:
    tasks: tuple[Task, ...]  # ordered by first unit
    verdict: Verdict


@dataclass(frozen=True)
class Selection:
    groups: tuple[Group, ...]  # ordered by first unit
    reasons: dict[int, str]  # task id -> why it was not fused


def _score(analysis: Analysis, scorer: Scorer, tasks: tuple[Task, ...]) -> Verdict:
    return scorer.score(fused_op_spec(analysis, tasks))


def _best_third(analysis: Analysis, scorer: Scorer, candidates: Candidates, group: Group, used: set[int]) -> Group:
    first, second = group.tasks
    engines = {first.engine, second.engine}
    shared = set(candidates.partners[first.id]) & set(candidates.partners[second.id])
    best = group
    for task_id in sorted(shared - used):
        third = analysis.tasks[task_id]
        if third.engine in engines or independence_problem(analysis, first, third) or independence_problem(
            analysis, second, third
        ):
            continue
        tasks = tuple(sorted((first, second, third), key=lambda t: t.lo))
        verdict = _score(analysis, scorer, tasks)
        if verdict.accepted and verdict.gain > best.verdict.gain:
            best = Group(tasks, verdict)
    return best


def _cyclic_groups(analysis: Analysis, groups: list[Group]) -> list[int]:
    """Indices of groups that lie on a cycle of the graph with every group contracted."""
    count = len(analysis.units.units)
    rep = list(range(count))
    for g, group in enumerate(groups):
        for task in group.tasks:
            for unit in task.units:
                rep[unit] = count + g
    edges = {(rep[u], rep[s]) for u, succ in enumerate(analysis.units.successors) for s in succ if rep[u] != rep[s]}
    quotient = nx.DiGraph(edges)
    if nx.is_directed_acyclic_graph(quotient):
        return []
    on_cycle = {node for scc in nx.strongly_connected_components(quotient) if len(scc) > 1 for node in scc}
    return sorted(node - count for node in on_cycle if node >= count)


def select_groups(analysis: Analysis, candidates: Candidates, scorer: Scorer) -> Selection:
    reasons = dict(candidates.reasons)
    scored: list[Group] = []
    for pair in candidates.pairs:
        tasks = (analysis.tasks[pair.first], analysis.tasks[pair.second])
        verdict = _score(analysis, scorer, tasks)
        if verdict.accepted:
            scored.append(Group(tasks, verdict))
        else:
            for task in tasks:
                reasons.setdefault(task.id, f"best partner rejected by {scorer.name} scorer: {verdict.reason}")
    scored.sort(key=lambda g: (-g.verdict.gain, g.tasks[0].lo, g.tasks[1].lo))
    used: set[int] = set()
    chosen: list[Group] = []
    for group in scored:
        if any(task.id in used for task in group.tasks):
            continue
        used.update(task.id for task in group.tasks)
        group = _best_third(analysis, scorer, candidates, group, used)
        used.update(task.id for task in group.tasks)
        chosen.append(group)
    while True:
        cyclic = _cyclic_groups(analysis, chosen)
        if not cyclic:
            break
        worst = min(cyclic, key=lambda g: (chosen[g].verdict.gain, -chosen[g].tasks[0].lo))
        for task in chosen[worst].tasks:
            reasons[task.id] = "its group would close a cycle with another fused group"
        del chosen[worst]
    fused = {task.id for group in chosen for task in group.tasks}
    for task_id in fused:
        reasons.pop(task_id, None)
    for task in analysis.tasks:
        if task.fusable and task.id not in reasons and task.id not in fused:
            reasons[task.id] = "every independent partner was taken by a better-scoring group"
    chosen.sort(key=lambda g: g.tasks[0].lo)
    return Selection(tuple(chosen), reasons)

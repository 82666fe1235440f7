"""Choose which candidate groups to fuse: disjoint pairs that save the most predicted time together,
extended to triples, kept only while the whole graph stays acyclic.

    candidates ──score──> accepted pairs ──greedy, in 3 orders──> disjoint groups (the largest total saving)
                                              └─ each: a pair, or a triple where a third engine adds to its
                                                 saving, unless it would close a cycle

Contracting two groups that are each convex can still close a cycle between them (a in G1 feeds b
in G2 while c in G2 feeds d in G1), so the quotient graph is checked once all groups are chosen and
the group saving least on any cycle is dropped until none is left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from hexfuse.graph_passes.analysis.candidates import Candidates
from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.tasks import Task
from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.select.balance import Scorer, Verdict
from hexfuse.graph_passes.select.contraction import Contraction
from hexfuse.graph_passes.spec.builder import fused_op_spec


MAX_FUSED_OPS = 10_000  # onnx.checker refuses models with more local functions (one per distinct group)


class Group(NamedTuple):
    tasks: tuple[Task, ...]  # ordered by first unit
    verdict: Verdict


@dataclass(frozen=True)
class Selection:
    groups: tuple[Group, ...]  # ordered by first unit
    reasons: dict[int, str]  # task id -> why it was not fused


class _Scores:
    """Verdicts by group structure: scorers see shapes and ops, never names, so equal structure
    (the same pair in every layer of an LM) is built into a spec and scored once (structure.py).
    A scorer whose ``per_instance`` is true (one replaying QNN's schedule, where a group's place in it
    matters) is asked once per group instead."""

    def __init__(self, analysis: Analysis, scorer: Scorer) -> None:
        self.analysis, self.scorer = analysis, scorer
        self.structures = analysis.structures
        self.per_instance = getattr(scorer, "per_instance", False)
        self._verdicts: dict[tuple, Verdict] = {}

    def __call__(self, tasks: tuple[Task, ...]) -> Verdict:
        return self._verdict(tasks, tuple(self.structures.task_keys(tasks)))

    def pairs(self, firsts: list[Task], seconds: list[Task]) -> list[Verdict]:
        """The verdicts of many pairs (firsts[i], seconds[i])."""
        keys = list(zip(self.structures.task_keys(firsts), self.structures.task_keys(seconds)))
        if self.per_instance:
            return [self._verdict((a, b), key) for a, b, key in zip(firsts, seconds, keys)]
        # Few distinct structures: each scored at its first pair, as one by one would.
        verdicts = self._verdicts
        for a, b, key in zip(firsts, seconds, keys):
            if key not in verdicts:
                self._verdict((a, b), key)
        return list(map(verdicts.__getitem__, keys))

    def _verdict(self, tasks: tuple[Task, ...], key: tuple) -> Verdict:
        if self.per_instance:
            key += tuple(task.id for task in tasks)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = self.scorer.score(fused_op_spec(self.analysis, tasks))
        return verdict


def _units(group: Group) -> list[int]:
    return [unit for task in group.tasks for unit in task.units]


def _thirds(analysis: Analysis, candidates: Candidates, pair: Group) -> list[Task]:
    """Tasks on a third engine that may join the pair, by id."""
    first, second = pair.tasks
    engines = {first.engine, second.engine}
    # Partners are proven independent, so a partner of both is independent of the whole pair.
    shared = set(candidates.partners[first.id]).intersection(candidates.partners[second.id])
    return [analysis.tasks[t] for t in sorted(shared) if analysis.tasks[t].engine not in engines]


def _best_third(analysis: Analysis, score: _Scores, candidates: Candidates, group: Group, used: set[int]) -> Group:
    """``used``: tasks already in a chosen group (the pair's own tasks are never their own partners)."""
    first, second = group.tasks
    best = group
    for third in _thirds(analysis, candidates, group):
        if third.id in used:
            continue
        tasks = tuple(sorted((first, second, third), key=lambda t: t.lo))
        verdict = score(tasks)
        if verdict.accepted and verdict.saved_ns > best.verdict.saved_ns:
            best = Group(tasks, verdict)
    return best


def _forward(analysis: Analysis, groups: list[Group]) -> bool:
    """Whether every edge of the graph with every group contracted goes forward when each group takes
    the place of its first unit (usual: a pair's units interleave in place). Places are distinct, so
    then the contracted graph has no cycle. Checked for all edges at once."""
    count = len(analysis.units)
    place = np.arange(count, dtype=np.int64)
    member = np.full(count, -1, dtype=np.int64)
    if groups:
        group_ptr, units = ragged.from_rows([_units(group) for group in groups])
        sizes = np.diff(group_ptr)
        place[units] = np.repeat(np.minimum.reduceat(units, group_ptr[:-1]), sizes)  # (a group has units)
        member[units] = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
    ptr, targets = ragged.from_rows(analysis.units.successors)
    sources = np.repeat(np.arange(count, dtype=np.int64), np.diff(ptr))
    between = (member[sources] != member[targets]) | (member[sources] < 0)
    return bool((place[sources] < place[targets])[between].all())


def _cycles(analysis: Analysis, groups: list[Group]) -> list[list[int]]:
    """The groups on each cycle of the graph with every group contracted (one list per cycle)."""
    if _forward(analysis, groups):
        return []
    count = len(analysis.units)
    rep = list(range(count))
    for g, group in enumerate(groups):
        for task in group.tasks:
            for unit in task.units:
                rep[unit] = count + g
    # Kahn on the quotient peels everything acyclic in linear time (an edge inside a group is skipped,
    # parallel edges are counted as often as they are walked); only what is left needs the SCC search.
    successors: list[list[int]] = [[] for _ in range(count + len(groups))]
    indegree = [0] * (count + len(groups))
    for unit, targets in enumerate(analysis.units.successors):
        a = rep[unit]
        for target in targets:
            b = rep[target]
            if a != b:
                successors[a].append(b)
                indegree[b] += 1
    nodes = set(rep)
    ready = [node for node in nodes if indegree[node] == 0]
    while ready:
        node = ready.pop()
        for target in successors[node]:
            indegree[target] -= 1
            if indegree[target] == 0:
                ready.append(target)
    left = {node for node in nodes if indegree[node] > 0}
    if not left:
        return []
    import networkx as nx  # only here: importing it costs more than a small model's whole pass

    residual = nx.DiGraph((a, b) for a in left for b in successors[a] if b in left)
    return [
        sorted(node - count for node in scc if node >= count)
        for scc in nx.strongly_connected_components(residual) if len(scc) > 1
    ]


def _within_function_limit(analysis: Analysis, chosen: list[Group], reasons: dict[int, str]) -> list[Group]:
    """Groups of at most MAX_FUSED_OPS distinct structures (one function each), the best-paying kept.
    Dropping a group never closes a cycle, so what is kept stays acyclic."""
    keys = analysis.structures.groups([group.tasks for group in chosen])
    best: dict[int, tuple[float, int]] = {}
    for key, group in zip(keys, chosen):
        best[key] = min(best.get(key, (0.0, group.tasks[0].lo)), (-group.verdict.saved_ns, group.tasks[0].lo))
    kept = set(sorted(best, key=best.__getitem__)[:MAX_FUSED_OPS])
    for key, group in zip(keys, chosen):
        if key not in kept:
            for task in group.tasks:
                reasons[task.id] = f"the model already has {MAX_FUSED_OPS} distinct fused ops (ONNX's limit on local functions)"
    return [group for key, group in zip(keys, chosen) if key in kept]


class _Ranked(NamedTuple):
    gap: int  # ASAP levels between the two tasks (0: they can become ready together)
    group: Group

    def positions(self) -> tuple[int, int]:  # unique per pair: groups themselves are never compared
        first, second = self.group.tasks
        return first.units[0], second.units[0]


# Greedy orders tried, the largest total saving kept, since each alone misses groups another finds:
# - level gap first: pairs that become ready together never close a cycle (every quotient edge then goes
#   up a level), while pairing early with late work across two branches ({a1, b2} and {a2, b1}) does;
#   but a weak same-level pair then takes a task before a strong pair across levels;
# - predicted gain first: the groups that pay most for their own time;
# - saved time first: the largest savings, though one large pair can take the tasks of two that save
#   more together (a greedy matching's known failure, which the gain order then catches).
ORDERS = (
    lambda r: (r.gap, -r.group.verdict.gain, *r.positions()),
    lambda r: (-r.group.verdict.gain, r.gap, *r.positions()),
    lambda r: (-r.group.verdict.saved_ns, r.gap, *r.positions()),
)


def _greedy(analysis: Analysis, score: _Scores, candidates: Candidates, ranked: list[_Ranked],
            reasons: dict[int, str]) -> list[Group]:
    """Disjoint groups in the order of ``ranked``, each extended to a triple where that saves more,
    skipping any that would close a cycle (``reasons`` gets why)."""
    used: set[int] = set()
    chosen: list[Group] = []
    contraction = Contraction(analysis.units.successors, analysis.units.predecessors)
    for entry in ranked:
        pair = entry.group
        first, second = pair.tasks
        if first.id in used or second.id in used:
            continue
        triple = _best_third(analysis, score, candidates, pair, used)
        group = None
        for option in (triple, pair) if triple is not pair else (pair,):
            units = _units(option)
            if not contraction.closes_cycle(units):
                group = option
                break
        if group is None:
            for task in pair.tasks:
                reasons.setdefault(task.id, "pairing it would close a cycle with groups already chosen")
            continue
        contraction.add(units)
        for task in group.tasks:
            used.add(task.id)
        chosen.append(group)
    # The contraction kept the graph acyclic; check the whole quotient once more, independently.
    while cycles := _cycles(analysis, chosen):
        # Drop the weakest group of every cycle at once; repeat, since a drop can leave a longer cycle.
        dropped = {min(cycle, key=lambda g: (chosen[g].verdict.saved_ns, -chosen[g].tasks[0].lo)) for cycle in cycles}
        for g in dropped:
            for task in chosen[g].tasks:
                reasons[task.id] = "its group would close a cycle with another fused group"
        chosen = [group for g, group in enumerate(chosen) if g not in dropped]
    return chosen


def select_groups(analysis: Analysis, candidates: Candidates, scorer: Scorer) -> Selection:
    reasons = dict(candidates.reasons)
    score = _Scores(analysis, scorer)
    accepted: list[_Ranked] = []
    tasks_by_id, level_range = analysis.tasks, analysis.level_range
    firsts = [tasks_by_id[pair.first] for pair in candidates.pairs]
    seconds = [tasks_by_id[pair.second] for pair in candidates.pairs]
    rejections: dict[int, str] = {}  # id(verdict) -> the reason it words (equal structures share a verdict)
    for first, second, verdict in zip(firsts, seconds, score.pairs(firsts, seconds)):
        if verdict.accepted:
            (low_a, high_a), (low_b, high_b) = level_range(first), level_range(second)
            gap = max(0, max(low_a, low_b) - min(high_a, high_b))
            accepted.append(_Ranked(gap, Group((first, second), verdict)))
        else:
            reason = rejections.get(id(verdict))
            if reason is None:
                reason = rejections[id(verdict)] = f"best partner rejected by {scorer.name} scorer: {verdict.reason}"
            reasons.setdefault(first.id, reason)
            reasons.setdefault(second.id, reason)
    chosen: list[Group] = []
    best, best_total = reasons, -math.inf
    for order in ORDERS if accepted else ():
        why = dict(reasons)
        groups = _greedy(analysis, score, candidates, sorted(accepted, key=order), why)
        total = math.fsum(sorted(group.verdict.saved_ns for group in groups))  # the same groups: the same sum
        if total > best_total:  # a tie keeps the earlier order
            chosen, best, best_total = groups, why, total
        if len(groups) == len(accepted) and not any(_thirds(analysis, candidates, r.group) for r in accepted):
            break  # every pair taken and none can grow: every order ends here
    reasons = best
    if len(chosen) > MAX_FUSED_OPS:
        chosen = _within_function_limit(analysis, chosen, reasons)
    fused = {task.id for group in chosen for task in group.tasks}
    for task_id in fused:
        reasons.pop(task_id, None)
    for task in analysis.tasks:
        if task.id not in reasons and task.id not in fused and task.fusable:
            reasons[task.id] = "every independent partner was taken by a better-scoring group"
    chosen.sort(key=lambda g: g.tasks[0].lo)
    return Selection(tuple(chosen), reasons)

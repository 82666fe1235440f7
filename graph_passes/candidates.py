"""Find candidate groups: tasks of different engines that are provably independent.

Two tasks A and B may share one fused node only if
  1. neither reaches the other (no path either way; beyond the reachability window: refused),
  2. no buffer hazard (RAW/WAR/WAW through views) between them, and
  3. the merged group is convex. Tasks are convex (tasks.py) and by 1. no path leaves one and
     enters the other, so any path leaving A ∪ B and re-entering would start and end in one task,
     contradicting its convexity: 3 follows from 1 and is re-checked on the final graph (select.py).
Partners are searched among the tasks placed near A in the level-sorted order, i.e. work that
becomes ready at about the same time. Every task left without a partner gets a reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from hexfuse.graph_passes.analysis import Analysis
from hexfuse.graph_passes.hazards import hazard
from hexfuse.graph_passes.reach import Reach
from hexfuse.graph_passes.tasks import Task

PARTNER_WINDOW = 64  # unit positions after a task's first unit searched for partners
MAX_PARTNERS = 4  # independent partners kept per task


@dataclass(frozen=True)
class Pair:
    first: int  # task ids, first.lo < second.lo
    second: int


@dataclass(frozen=True)
class Candidates:
    pairs: tuple[Pair, ...]
    partners: dict[int, tuple[int, ...]]  # task id -> independent partner task ids (both directions)
    reasons: dict[int, str]  # fusable task id without any partner -> why


Problem = Callable[[], str | None]  # words the reason only when someone reads it


def independence_problem(analysis: Analysis, a: Task, b: Task) -> str | None:
    """Why tasks a and b may not run at the same time, or None when they provably may."""
    for source, target in ((a, b), (b, a)):
        path = analysis.reach.first_path(source.units, target.units)
        if path is not None:
            start, end, answer = path
            verb = "reaches" if answer is Reach.YES else "is too far in the schedule to prove independent of"
            return f"{analysis.unit_label(start)} {verb} {analysis.unit_label(end)}"
    return hazard(analysis.buffers(a), analysis.buffers(b))


def level_gap(analysis: Analysis, a: Task, b: Task) -> int:
    """How many ASAP levels apart two tasks become ready (0 when their level ranges overlap)."""
    low_a, high_a = analysis.level_range(a)
    low_b, high_b = analysis.level_range(b)
    return max(0, max(low_a, low_b) - min(high_a, high_b))


class _ReachMasks:
    """Per task, the units it reaches as one bitset: a pair check is then a few shifts."""

    def __init__(self, analysis: Analysis) -> None:
        self._reach = analysis.reach
        self._masks: dict[int, int] = {}

    def may_reach(self, a: Task, b: Task) -> bool:
        """True when a reaches b, or when the window cannot tell (independence_problem then words it)."""
        mask = self._masks.get(a.id)
        if mask is None:
            mask = self._masks[a.id] = self._reach.mask_from(a.units)
        for unit in b.units:
            distance = unit - a.lo
            if distance > self._reach.window:
                return True
            if distance > 0 and (mask >> (distance - 1)) & 1:
                return True
        return False


def find_candidates(analysis: Analysis) -> Candidates:
    reasons: dict[int, str] = {}
    fusable = []
    for task in analysis.tasks:
        if task.fusable:
            blocked = analysis.claim_blocker(task)
            if blocked is None:
                fusable.append(task)
            else:
                reasons[task.id] = blocked
    masks = _ReachMasks(analysis)
    by_lo = sorted(fusable, key=lambda task: (task.lo, task.id))
    pairs: list[Pair] = []
    partners: dict[int, list[int]] = {task.id: [] for task in fusable}
    first_problem: dict[int, Problem] = {}
    for i, a in enumerate(by_lo):
        for j in range(i + 1, len(by_lo)):  # indices, not a slice: a slice copies the tail every time
            b = by_lo[j]
            if b.lo - a.lo > PARTNER_WINDOW or len(partners[a.id]) >= MAX_PARTNERS:
                break
            if b.engine is a.engine:
                continue
            if masks.may_reach(a, b) or masks.may_reach(b, a) or hazard(analysis.buffers(a), analysis.buffers(b)):
                problem = functools.partial(independence_problem, analysis, a, b)  # worded only if read
                first_problem.setdefault(a.id, problem)
                first_problem.setdefault(b.id, problem)
                continue
            pairs.append(Pair(a.id, b.id))
            partners[a.id].append(b.id)
            partners[b.id].append(a.id)
    for task in fusable:
        if not partners[task.id]:
            problem = first_problem.get(task.id)
            reasons[task.id] = problem() if problem else "no task of another engine becomes ready near it (the graph is a chain here)"
    return Candidates(tuple(pairs), {k: tuple(v) for k, v in partners.items()}, reasons)

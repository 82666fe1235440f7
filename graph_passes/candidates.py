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
    return hazard(analysis.buffers(a), analysis.buffers(b), analysis.flat.names)


def level_gap(analysis: Analysis, a: Task, b: Task) -> int:
    """How many ASAP levels apart two tasks become ready (0 when their level ranges overlap)."""
    low_a, high_a = analysis.level_range(a)
    low_b, high_b = analysis.level_range(b)
    return max(0, max(low_a, low_b) - min(high_a, high_b))


def _own_mask(task: Task) -> int:
    """Bit j set <=> unit task.lo + j belongs to the task."""
    lo, mask = task.units[0], 0
    for unit in task.units:
        mask |= 1 << (unit - lo)
    return mask


def find_candidates(analysis: Analysis) -> Candidates:
    """Independent pairs of tasks of different engines that become ready near each other.

    Per task, two bitsets relative to its first unit lo: the units it reaches (bit i: unit lo + 1 + i,
    exact within the reachability window) and its own units (bit j: unit lo + j). Whether a reaches b
    is then one shift and one AND; beyond the window the answer is "may" (refused, worded later)."""
    fusable = sorted((task for task in analysis.tasks if task.fusable), key=lambda task: (task.units[0], task.id))
    window = analysis.reach.window
    los = [task.units[0] for task in fusable]
    his = [task.units[-1] for task in fusable]
    engines = [task.engine for task in fusable]
    reaches = [analysis.reach.mask_from(task.units) for task in fusable]
    owns = [_own_mask(task) for task in fusable]
    ids = [task.id for task in fusable]
    names = analysis.flat.names
    buffers = analysis.buffers
    pairs: list[Pair] = []
    partners: dict[int, list[int]] = {task.id: [] for task in fusable}
    first_problem: dict[int, Problem] = {}
    count = len(fusable)
    for i, a in enumerate(fusable):
        own = partners[a.id]
        if len(own) >= MAX_PARTNERS:
            continue
        a_lo, a_hi, a_reach, a_own, a_engine = los[i], his[i], reaches[i], owns[i], engines[i]
        limit, reach_limit = a_lo + PARTNER_WINDOW, a_lo + window
        for j in range(i + 1, count):  # indices, not a slice: a slice copies the tail every time
            b_lo = los[j]
            if b_lo > limit:
                break
            if engines[j] is a_engine:
                continue
            b = fusable[j]
            if (his[j] > reach_limit or a_hi - b_lo > window  # the window cannot tell
                    or (a_reach >> (b_lo - a_lo - 1)) & owns[j]  # a reaches b
                    # b reaches a: only a's units after b.lo can be; shift b's bits onto a's frame
                    or (a_hi > b_lo and (reaches[j] << (b_lo + 1 - a_lo)) & a_own)
                    or hazard(buffers(a), buffers(b), names)):
                if a.id not in first_problem or ids[j] not in first_problem:
                    problem = functools.partial(independence_problem, analysis, a, b)  # worded only if read
                    first_problem.setdefault(a.id, problem)
                    first_problem.setdefault(ids[j], problem)
                continue
            pairs.append(Pair(a.id, ids[j]))
            own.append(ids[j])
            partners[ids[j]].append(a.id)
            if len(own) >= MAX_PARTNERS:
                break
    reasons = {}
    for task in analysis.tasks:
        if task.fusable and not partners[task.id]:
            problem = first_problem.get(task.id)
            reasons[task.id] = problem() if problem else "no task of another engine becomes ready near it (the graph is a chain here)"
    return Candidates(tuple(pairs), {k: tuple(v) for k, v in partners.items()}, reasons)

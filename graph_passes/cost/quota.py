"""Choose the quota of a concurrent fused entry: HVX contexts per task, VTCM split, tile counts.

The space is small on purpose (the pass scores up to ~1e5 groups): every split of the HVX contexts
among the tasks that use HVX (a matrix task needs HVX only for packing/requant, or for an HVX matrix
kernel), each non-matrix task holding its task op's fixed share (``target.op_hvx_contexts``),
times a handful of VTCM splits (equal, proportional to working sets, and one favouring each task).  Tile counts follow
from the VTCM share (simulate.tiles_for).  Every candidate is simulated; the shortest wins.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hexfuse.graph_passes.cost.opcost import TaskCost
from hexfuse.graph_passes.cost.simulate import (
    Infeasible,
    Schedule,
    TaskPlan,
    plan_task,
    simulate,
)
from hexfuse.graph_passes.cost.target import Target


@dataclass(frozen=True)
class Quota:
    hvx: tuple[int, ...]  # contexts per task, in task order
    vtcm: tuple[float, ...]  # bytes per task


@dataclass(frozen=True)
class QuotaChoice:
    quota: Quota
    plans: tuple[TaskPlan, ...]
    schedule: Schedule
    tried: int


def _uses_hvx(cost: TaskCost) -> bool:
    return cost.main_lane == "hvx" or cost.hvx_side_ns > 0


def hvx_splits(costs: list[TaskCost], contexts: int, fixed: dict[int, int] | None = None) -> list[tuple[int, ...]]:
    """Every split of the HVX contexts among the tasks that use HVX; ``fixed``: task index -> the
    contexts it always gets (a package task op runs on its own HVX thread), the rest share the remainder."""
    fixed = {i: n for i, n in (fixed or {}).items() if _uses_hvx(costs[i])}
    users = [i for i, c in enumerate(costs) if _uses_hvx(c) and i not in fixed]
    free = contexts - sum(fixed.values())
    if free < len(users) or free < 0:
        return []
    base = [fixed.get(i, 0) for i in range(len(costs))]
    if not users:
        return [tuple(base)]
    splits = []
    for combo in itertools.product(range(1, free + 1), repeat=len(users)):
        if sum(combo) != free:
            continue
        split = list(base)
        for i, n in zip(users, combo):
            split[i] = n
        splits.append(tuple(split))
    return splits


def vtcm_splits(costs: list[TaskCost], vtcm: float) -> list[tuple[float, ...]]:
    n = len(costs)
    weights = [max(c.vtcm_bytes, 1.0) for c in costs]
    total = sum(weights)
    fractions = {tuple(1.0 / n for _ in costs), tuple(w / total for w in weights)}
    for i in range(n):
        rest = 0.25 / (n - 1) if n > 1 else 0.0
        fractions.add(tuple(0.75 if j == i else rest for j in range(n)))
    # a task never needs more than its whole working set (double-buffered); give the rest away
    out = []
    for fraction in sorted(fractions):
        out.append(tuple(f * vtcm for f in fraction))
    return out


def search_quota(costs: list[TaskCost], target: Target) -> QuotaChoice:
    """The best concurrent schedule; raises Infeasible with the last reason when nothing fits."""
    best: QuotaChoice | None = None
    tried = 0
    problem = "no HVX split gives every HVX-using task a context"
    fixed = {i: target.op_hvx_contexts for i, c in enumerate(costs) if c.engine != "matrix"}  # task ops
    for hvx in hvx_splits(costs, target.hvx_contexts, fixed):
        for vtcm in vtcm_splits(costs, target.vtcm_bytes):
            try:
                plans = tuple(plan_task(c, target, h, v, target.launch_ns) for c, h, v in zip(costs, hvx, vtcm))
            except Infeasible as exc:
                problem = str(exc)
                continue
            tried += 1
            schedule = simulate(list(plans))
            if best is None or schedule.makespan < best.schedule.makespan:
                best = QuotaChoice(Quota(hvx, vtcm), plans, schedule, tried)
    if best is None:
        raise Infeasible(problem)
    return QuotaChoice(best.quota, best.plans, best.schedule, tried)

"""The four baselines of DESIGN.md section 7 for one group, in ns.

    (1) t1 original serial      each compute node is its own QNN op: dispatch_ns per op, tasks one
                                after another, each with the whole HVX pool and VTCM
    (2) t2 best existing        (1) plus QNN's own background launch/wait. Assumption: HTP only
                                overlaps DMA prefetch of the next op's first tile with the current op
                                (compute ops never run side by side; Scheduling and Allocation doc).
                                Best task order is taken.
    (3) t3 fused serial         one entry (one dispatch), tasks one after another inside it (barrier
                                mode). Every tile micro-op pays launch_ns in all four baselines: QNN's
                                kernels issue and wait on the same tiles, so only dispatches differ
    (4) t4 fused concurrent     one entry, tasks side by side under the best quota (quota.py)

    entry-merge gain = (t1 - t3) / t1      overlap gain = (t3 - t4) / t1      (they add up)

    t1 |d|==A==|d|d|===B===|              t3 |d|==A==|===B===|
    t2 |d|==A==|d|d|===B===|  (B's first  t4 |d|==A=====|
                  ^^ B prefetch hidden)        |===B===|
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from hexfuse.graph_passes.cost.opcost import TaskCost
from hexfuse.graph_passes.cost.quota import QuotaChoice, search_quota
from hexfuse.graph_passes.cost.simulate import (
    Schedule,
    TaskPlan,
    plan_task,
    run_serial,
    simulate,
)
from hexfuse.graph_passes.cost.target import Target


@dataclass(frozen=True)
class Baselines:
    t1_serial: float
    t2_best_existing: float
    t3_fused_serial: float
    t4_fused_concurrent: float
    serial: Schedule  # the inside of (3), for timelines
    concurrent: Schedule  # the inside of (4)
    choice: QuotaChoice
    alone_ns: tuple[float, ...]  # each task alone, whole pool

    @property
    def entry_merge_gain(self) -> float:
        return (self.t1_serial - self.t3_fused_serial) / self.t1_serial if self.t1_serial > 0 else 0.0

    @property
    def overlap_gain(self) -> float:
        return (self.t3_fused_serial - self.t4_fused_concurrent) / self.t1_serial if self.t1_serial > 0 else 0.0

    @property
    def gain(self) -> float:
        """What fusion saves against the best existing execution (2)."""
        return 1.0 - self.t4_fused_concurrent / self.t2_best_existing if self.t2_best_existing > 0 else 0.0


def alone_plan(cost: TaskCost, target: Target) -> TaskPlan:
    """The task by itself: the whole HVX pool and VTCM (how a QNN op runs it)."""
    return plan_task(cost, target, target.hvx_contexts, target.vtcm_bytes, target.launch_ns)


def _prefetch_ns(plan: TaskPlan) -> float:
    first = plan.stages[0]
    return first.ns if first.kind == "dma_in" else 0.0


def best_existing(costs: list[TaskCost], plans: list[TaskPlan], alone: list[float], target: Target) -> float:
    t1 = sum(alone) + target.dispatch_ns * sum(c.dispatches for c in costs)
    best_saving = 0.0
    for order in itertools.permutations(range(len(costs))):
        saving = sum(min(_prefetch_ns(plans[b]), alone[a]) for a, b in itertools.pairwise(order))
        best_saving = max(best_saving, saving)
    return t1 - best_saving


def predict(costs: list[TaskCost], target: Target, choice: QuotaChoice | None = None) -> Baselines:
    """All four baselines; raises simulate.Infeasible when no concurrent quota fits VTCM/HVX."""
    plans0 = [alone_plan(c, target) for c in costs]
    alone = [simulate([p]).makespan for p in plans0]
    t1 = sum(alone) + target.dispatch_ns * sum(c.dispatches for c in costs)
    t2 = best_existing(costs, plans0, alone, target)
    serial = run_serial(plans0)
    choice = choice or search_quota(costs, target)
    t3 = target.dispatch_ns + serial.makespan
    t4 = target.dispatch_ns + choice.schedule.makespan
    return Baselines(t1, t2, t3, t4, serial, choice.schedule, choice, tuple(alone))

"""The four baselines of DESIGN.md section 7 for one group, in ns, for the HTP executor.

How a fused op runs on HTP (op_package/htp_expand.py): at prepare, package rules expand it into its
matrix task's QNN ops (one per compute node, as before) plus one package *task op* per other task,
launched on an HVX thread (a launch/wait pair) and run on ``op_hvx_contexts`` HVX contexts. So
fusing saves dispatches only where several non-matrix nodes become one task op, and the overlap comes
from the task op running on HVX while the main thread issues the matrix ops.

    (1) t1 original serial      QNN today: every compute node its own op (dispatch_ns each; an op run on
                                an HVX thread also hvx_launch_ns), tasks one after another, each with the
                                whole VTCM and the HVX contexts QNN gives it (``today_contexts``)
    (2) t2 best existing        (1) plus QNN's own background launch/wait. Assumption: HTP only
                                overlaps DMA prefetch of the next op's first tile with the current op
                                (compute ops never run side by side; Scheduling and Allocation doc).
                                Best task order is taken.
    (3) t3 fused serial         the expanded ops with the barrier switch on: task ops wait for the work
                                before them. Every tile micro-op pays launch_ns in all four baselines:
                                QNN's kernels issue and wait on the same tiles
    (4) t4 fused concurrent     the expanded ops, task ops on their HVX threads beside the matrix ops,
                                under the best quota (quota.py)

    entry-merge gain = (t1 - t3) / t1      overlap gain = (t3 - t4) / t1      (they add up)

    t1 |d|==A==|d+l|===B===|              t3 |d|==A==|d+l|=====B (1 ctx)=====|
    t2 |d|==A==|d+l|===B===|  (B's first  t4 |d|==A=====|
                  ^^ B prefetch hidden)      |d+l|=====B (1 ctx)=====|

VTCM: QNN tiles its own matrix ops into VTCM, but a task op gets its tensors whole (those small enough to
stay resident; bigger ones stream from DDR). When those and the matrix task's smallest tiles cannot sit
in VTCM together, QNN's VTCM address reuse adds ordering edges between the two and the concurrent run
degenerates to the serial one (``vtcm_ordered``: t4 = t3).

The estimated per-op constants enter linearly: t2 - t4 = engine time saved + dispatch_ns x (ops
saved) + hvx_launch_ns x (HVX launches saved); ``Baselines.constants_ns`` is that part, so a report can
say how much of a predicted gain rests on them.
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
    ops_serial: int = 0  # QNN ops today (t1)
    ops_fused: int = 0  # QNN ops after the expansion (t3, t4)
    launches_serial: int = 0  # ops launched on an HVX thread today
    launches_fused: int = 0
    dispatch_ns: float = 0.0  # the target's estimates these counts were priced with
    hvx_launch_ns: float = 0.0
    vtcm_ordered: bool = False  # VTCM reuse orders the task ops after the matrix work (t4 = t3)
    package_ns: float = 0.0  # what holding the group together adds (entry, joins, ports in DDR, copies): in t3 and t4

    @property
    def fused_overhead_ns(self) -> float:
        """Dispatches and HVX launches of the expanded ops and what the package adds (t3 and t4 both pay them)."""
        return self.dispatch_ns * self.ops_fused + self.hvx_launch_ns * self.launches_fused + self.package_ns

    @property
    def saved_ns(self) -> float:
        return self.t2_best_existing - self.t4_fused_concurrent

    @property
    def dispatch_saved_ns(self) -> float:
        return self.dispatch_ns * (self.ops_serial - self.ops_fused)

    @property
    def launch_saved_ns(self) -> float:
        return self.hvx_launch_ns * (self.launches_serial - self.launches_fused)

    @property
    def constants_ns(self) -> float:
        """The part of ``saved_ns`` (and of the entry merge) that is dispatch_ns and hvx_launch_ns."""
        return self.dispatch_saved_ns + self.launch_saved_ns

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


def today_contexts(cost: TaskCost, target: Target) -> int:
    """HVX contexts QNN's own ops of a task use today: as many as the engine map saw it slice them into;
    without a map, the whole pool for matrix work (QNN slices its convolutions and their helpers) and one
    HVX op's share for anything else."""
    original = cost.original
    if original.slices:
        return min(target.hvx_contexts, original.slices)
    return target.hvx_contexts if original.engine == "matrix" else target.op_hvx_contexts


def alone_plan(cost: TaskCost, target: Target) -> TaskPlan:
    """The task by itself as QNN runs it today: its original view, its HVX share, the whole VTCM."""
    return plan_task(cost.original, target, today_contexts(cost, target), target.vtcm_bytes, target.launch_ns)


def overhead_ns(costs: list[TaskCost], target: Target) -> float:
    """Dispatches and HVX launches of the tasks' nodes as QNN's own ops (baseline 1)."""
    return sum(target.dispatch_ns * c.original.dispatches + target.hvx_launch_ns * c.original.hvx_ops for c in costs)


def fused_contexts(cost: TaskCost, target: Target) -> int | None:
    """HVX contexts a task gets inside the fused op: a task op's fixed share; None: QNN's own ops (quota)."""
    return None if cost.engine == "matrix" else target.op_hvx_contexts


def vtcm_ordered(costs: list[TaskCost], target: Target) -> bool:
    """The task ops' resident tensors and the matrix tasks' smallest tiles do not fit VTCM together."""
    task_ops = sum(max(0.0, c.vtcm_bytes - c.ddr_in - c.ddr_out) for c in costs if c.engine != "matrix")
    matrix = sum(c.min_tile_bytes for c in costs if c.engine == "matrix")
    return task_ops > 0 and matrix > 0 and task_ops + matrix > target.vtcm_bytes


def _fused_counts(costs: list[TaskCost]) -> tuple[int, int]:
    """(QNN ops, HVX launches) after the expansion: matrix tasks keep their ops, other tasks are one task op."""
    ops = sum(c.dispatches if c.engine == "matrix" else 1 for c in costs)
    launches = sum(c.hvx_ops if c.engine == "matrix" else 1 for c in costs)
    return ops, launches


def _prefetch_ns(plan: TaskPlan) -> float:
    first = plan.stages[0]
    return first.ns if first.kind == "dma_in" else 0.0


def best_existing(costs: list[TaskCost], plans: list[TaskPlan], alone: list[float], target: Target) -> float:
    t1 = sum(alone) + overhead_ns(costs, target)
    best_saving = 0.0
    for order in itertools.permutations(range(len(costs))):
        saving = sum(min(_prefetch_ns(plans[b]), alone[a]) for a, b in itertools.pairwise(order))
        best_saving = max(best_saving, saving)
    return t1 - best_saving


def predict(costs: list[TaskCost], target: Target, choice: QuotaChoice | None = None,
            package_ns: float = 0.0) -> Baselines:
    """All four baselines; raises simulate.Infeasible when no concurrent quota fits VTCM/HVX. ``package_ns``:
    what the package's entry, joins, ports in main memory and QNN's copies for them add (replay.expansion),
    on the critical path of both fused runs: an upper bound for t4, where the task ops' ports might hide
    behind the matrix work."""
    plans0 = [alone_plan(c, target) for c in costs]
    alone = [simulate([p]).makespan for p in plans0]
    t1 = sum(alone) + overhead_ns(costs, target)
    t2 = best_existing(costs, plans0, alone, target)
    serial = run_serial([plan_task(c, target, fused_contexts(c, target) or target.hvx_contexts, target.vtcm_bytes,
                                   target.launch_ns) for c in costs])
    choice = choice or search_quota(costs, target)
    ops, launches = _fused_counts(costs)
    overhead = target.dispatch_ns * ops + target.hvx_launch_ns * launches + package_ns
    ordered = vtcm_ordered(costs, target)
    concurrent = serial if ordered else choice.schedule
    t3 = overhead + serial.makespan
    t4 = overhead + concurrent.makespan
    ops_today = sum(c.original.dispatches for c in costs)
    launches_today = sum(c.original.hvx_ops for c in costs)
    return Baselines(t1, t2, t3, t4, serial, concurrent, choice, tuple(alone), ops_today, ops, launches_today,
                     launches, target.dispatch_ns, target.hvx_launch_ns, ordered, package_ns)

"""Decide an HTP fusion from QNN's own schedule of the original model (replay.py), not from estimates.

    engine map ── schedule (happens-before graph of the prepared original) ──┐
    candidate group (matrix task nodes, task nodes, port bytes) ─────────────┼─> replay original (t2)
                                                                             └─> replay fused form (t4)

A group is fused only where
  1. QNN runs its matrix work on HMX and every other task has ops of its own (something to overlap);
  2. QNN's schedule keeps some of the group's vector work ordered against its HMX ops (where QNN already
     lets all of it run beside them there is nothing left to win); and
  3. the replay of the fused form, with its entry and exit ordering ops, launches, its package ops' ports in
     main memory and QNN's layout copies for them (at the width QNN hands a port over: codes for a QDQ
     port; replay.py), beats the replay of the original by the margin,
     measured against the group's own time in the original; the saving credited is at most the vector
     work less what the fused form adds (overlap hides that work and nothing else: a larger replay saving
     is the rest of the graph re-ordered, which fusing does not buy).

Both replays use the same per-op costs (replay.op_costs: the target's rates, qnn_op_ns, qnn_hvx_op_ns)
and the same scheduler, so what moves t4 against t2 is the fusion. How much of t2 rests on the per-op
estimates is reported with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hexfuse.graph_passes.select.balance import Verdict
from hexfuse.graph_passes.cost.replay import (
    Graph,
    Group,
    OpCosts,
    Replay,
    Unholdable,
    fuse_group,
    fused_costs,
    graph_of,
    op_costs,
    replay,
)
from hexfuse.graph_passes.cost.target import Target
from hexfuse.graph_passes.engines.qnn_schedule import QnnSchedule
from hexfuse.graph_passes.spec.model import FusedOp, TensorSpec

CACHE_LIMIT = 50_000


def _nbytes(tensor: TensorSpec | None) -> int:
    if tensor is None:
        return 0
    try:
        size = np.dtype(tensor.dtype).itemsize
    except TypeError:
        size = 4
    return math.prod(tensor.shape) * size


def _stored_bytes(tensor: TensorSpec | None) -> int:
    """Bytes as a task op receives it: a QDQ port (``wire``) arrives as its codes, not as floats."""
    if tensor is not None and tensor.wire is not None:
        return math.prod(tensor.shape) * np.dtype(tensor.wire.dtype).itemsize
    return _nbytes(tensor)


def group_of(op: FusedOp) -> Group:
    tensors = {t.name: t for t in op.tensors} | {t.name: t for t in (*op.inputs, *op.outputs)}
    matrix = [task for task in op.tasks if task.engine == "matrix"]
    others = [task for task in op.tasks if task.engine != "matrix"]
    carrier = op.entry_carrier
    matrix_outputs = {n for task in matrix for n in task.outputs}
    return Group(frozenset(n.name for task in matrix for n in task.nodes),
                 tuple(frozenset(n.name for n in task.nodes) for task in others),
                 tuple(sum(_stored_bytes(tensors.get(name)) for name in (*task.inputs, *task.outputs)) for task in others),
                 tuple(_stored_bytes(t) for t in op.outputs if t.name not in matrix_outputs),
                 sum(_stored_bytes(t) for t in op.inputs if not t.static),
                 _stored_bytes(op.inputs[carrier]) if carrier is not None else 0,
                 sum(_stored_bytes(t) for t in op.outputs if t.name in matrix_outputs))


@dataclass
class ScheduleJudge:
    """Replays one schedule on one target; verdicts per group (by node names), cached."""

    schedule: QnnSchedule
    target: Target
    min_gain: float
    costs: OpCosts = field(init=False)
    base: Graph = field(init=False)
    original: Replay = field(init=False)
    _verdicts: dict[Group, Verdict] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.costs = op_costs(self.schedule, self.target)
        self.base = graph_of(self.schedule, self.costs, gating=False)
        self.original = replay(self.base, self.target.hvx_contexts)

    @property
    def estimated_share(self) -> float:
        """Share of the original's op time that is the per-op constants qnn_op_ns / qnn_hvx_op_ns."""
        total = sum(self.costs.run)
        return sum(self.costs.overhead) / total if total else 0.0

    def verdict(self, op: FusedOp) -> Verdict:
        group = group_of(op)
        found = self._verdicts.get(group)
        if found is None:
            found = self._judge(group)
            if len(self._verdicts) < CACHE_LIMIT:
                self._verdicts[group] = found
        return found

    def _judge(self, group: Group) -> Verdict:
        ops = self.schedule.ops
        hmx = [i for i in self.schedule.of_nodes(group.matrix_nodes) if ops[i].resource == "hmx"]
        if not hmx:
            return Verdict(False, 0.0, "no HMX op: in QNN's schedule the matrix task runs no HMX op (nothing for "
                                       "the vector work to overlap)", {})
        vector = [i for i in self.schedule.of_nodes(set().union(*group.task_nodes)) if ops[i].resource != "dma"]
        if not vector:
            return Verdict(False, 0.0, "folded away: in QNN's schedule the other tasks run no op of their own", {})
        beside = sum(1 for v in vector if any(not self.schedule.ordered(v, m) for m in hmx))
        details = {"schedule.vector_ops": float(len(vector)), "schedule.beside_hmx": float(beside),
                   "schedule.hmx_ops": float(len(hmx)), "schedule.t2_ns": round(self.original.latency_ns, 1),
                   "schedule.estimated_share": round(self.estimated_share, 4)}
        if beside == len(vector):
            return Verdict(False, 0.0, f"QNN already overlaps it: all {len(vector)} QNN ops of the vector work may run "
                                       f"beside the group's HMX ops in QNN's own schedule", details)
        group_ns = sum(self.costs.run[i] for i in self.schedule.of_nodes(group.matrix_nodes | set().union(*group.task_nodes)))
        work = sum(self.costs.run[i] - self.costs.overhead[i] for i in vector)
        details.update({"schedule.group_ns": round(group_ns, 1), "schedule.work_ns": round(work, 1)})
        if work < self.min_gain * group_ns:  # overlap hides task work, nothing else: the ceiling
            return Verdict(False, work / group_ns if group_ns else 0.0, (
                f"too little to hide: in QNN's schedule the vector work ({work / 1e3:.2f} us) is below the margin "
                f"{self.min_gain:.0%} of the group's {group_ns / 1e3:.2f} us, even if overlap hid all of it"), details)
        bound = fused_costs(self.schedule, self.costs, self.target, group)
        if bound is not None and bound[0] <= bound[1]:  # the credit below is at most their difference: no replay
            return Verdict(False, 0.0, (
                f"too little to hide: in QNN's schedule the task work ({bound[0] / 1e3:.2f} us) does not cover what "
                f"holding the group together adds ({bound[1] / 1e3:.2f} us: entry, joins, launches, ports in main "
                f"memory and their copies)"), details)
        try:
            fused = fuse_group(self.schedule, self.costs, self.target, group, (self.base, self.original))
        except Unholdable as chain:
            return Verdict(False, 0.0, f"cannot be held together in QNN's schedule (its own constraints order part of "
                                       f"the group after the rest): {chain}", details)
        if fused is None:  # one task of several runs no op of its own
            return Verdict(False, 0.0, "folded away: in QNN's schedule a task runs no op of its own", details)
        after = replay(fused.graph, self.target.hvx_contexts)
        t2, t4 = self.original.latency_ns, after.latency_ns
        # Overlap hides the vector work and nothing else, and the fused form pays for its added ops: a replay
        # saving beyond that comes from re-ordering the rest of the graph, which fusing does not buy
        credited = min(t2 - t4, fused.task_ns - fused.added_ns)
        gain = credited / group_ns if group_ns > 0 else 0.0
        details.update({"schedule.t4_ns": round(t4, 1), "schedule.task_ns": round(fused.task_ns, 1),
                        "schedule.added_ns": round(fused.added_ns, 1), "schedule.moved_ops": float(fused.moved),
                        "schedule.credited_ns": round(credited, 1), "schedule.gain": round(gain, 4)})
        figures = (f"replay of QNN's schedule: {t4 / 1e3:.2f} us fused vs {t2 / 1e3:.2f} us original; the task work "
                   f"({fused.task_ns / 1e3:.2f} us, {beside} of {len(vector)} ops already beside HMX) could hide at most that, "
                   f"entry/exit ordering ops, launches, ports in main memory and their copies add {fused.added_ns / 1e3:.2f} us")
        if credited <= 0 or gain < self.min_gain:
            capped = (f" (the replay's {(t2 - t4) / 1e3:.2f} us beyond the task work less the added ops is re-ordering, "
                      f"not overlap)" if t2 - t4 > max(credited, 0.0) else "")
            return Verdict(False, max(0.0, gain), f"{figures}: gain {gain:.1%} of the group's {group_ns / 1e3:.2f} us "
                                                  f"< margin {self.min_gain:.0%}{capped}", details)
        return Verdict(True, gain, f"{figures}: saves {credited / 1e3:.2f} us ({gain:.1%} of the group)", details, credited)

"""The whole model's predicted latency, before and after fusion, on one denominator.

    serial   every task of the model as QNN runs it today: each compute node its own op (dispatch +
             the node alone), one after another (baseline 1 of each task, cost/baselines.py)
    saved    per fused group, t1 - t4 = (t1 - t3) entry merge + (t3 - t4) engine overlap
    fused    serial - sum of saved

    total gain = saved / serial = entry merge / serial + overlap / serial      (the parts add up)

Tasks are priced once per structure (graph_passes.analysis.structure), so a 1e5-node LM costs a handful of
predictions. Units outside every task (opaque ops, dynamic shapes, ops without a kernel) are not
priced; the summary counts them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.cost.scorer import CostScorer
from hexfuse.graph_passes.cost.simulate import Infeasible
from hexfuse.graph_passes.engines.classify import Engine
from hexfuse.graph_passes.select.groups import Group
from hexfuse.graph_passes.spec.builder import fused_op_spec


@dataclass(frozen=True)
class ModelSummary:
    target: str
    serial_ns: float
    entry_merge_ns: float  # saved by fewer ops (each non-matrix task one task op) and what that changes
    overlap_ns: float  # saved by running the tasks of a fused node on their engines at once
    priced_tasks: int
    unpriced_units: int  # units in no task, or whose task has no feasible schedule
    schedule: dict[str, Any] = field(default_factory=dict)  # QNN's schedule replayed, where the map holds it

    @property
    def saved_ns(self) -> float:
        return self.entry_merge_ns + self.overlap_ns

    @property
    def fused_ns(self) -> float:
        return self.serial_ns - self.saved_ns

    def share(self, ns: float) -> float:
        return ns / self.serial_ns if self.serial_ns > 0 else 0.0

    def as_dict(self) -> dict[str, float | int | str]:
        return {
            "target": self.target, "serial_us": round(self.serial_ns / 1e3, 3), "fused_us": round(self.fused_ns / 1e3, 3),
            "saved_us": round(self.saved_ns / 1e3, 3), "entry_merge_us": round(self.entry_merge_ns / 1e3, 3),
            "overlap_us": round(self.overlap_ns / 1e3, 3), "total_gain": round(self.share(self.saved_ns), 6),
            "entry_merge_gain": round(self.share(self.entry_merge_ns), 6), "overlap_gain": round(self.share(self.overlap_ns), 6),
            "priced_tasks": self.priced_tasks, "unpriced_units": self.unpriced_units,
            "schedule": self.schedule or None,
        }


def summarize(analysis: Analysis, groups: tuple[Group, ...], scorer: CostScorer) -> ModelSummary:
    structures = analysis.structures
    serial_by_key: dict[int, float | None] = {}
    serial, priced, infeasible = 0.0, 0, 0
    for task in analysis.tasks:
        if task.engine is Engine.FREE:  # views and shape arithmetic: no engine time
            priced += 1
            continue
        key = structures.task(task)
        if key not in serial_by_key:
            try:
                serial_by_key[key] = scorer.serial_ns(fused_op_spec(analysis, (task,)))
            except Infeasible:  # no tile of it fits VTCM: the cost model cannot price it
                serial_by_key[key] = None
        ns = serial_by_key[key]
        if ns is None:
            infeasible += len(task.units)
            continue
        serial += ns
        priced += 1
    merge = overlap = 0.0
    for group in groups:
        d = group.verdict.details
        if {"t1_serial", "t3_fused_serial", "t4_fused_concurrent"} <= d.keys():
            merge += d["t1_serial"] - d["t3_fused_serial"]
            overlap += d["t3_fused_serial"] - d["t4_fused_concurrent"]
    # Units in no task: opaque ops, dynamic shapes, ops without a kernel (constants are folded: free).
    blocked = sum(1 for blocker in analysis.units.blocker if blocker is not None and "computes a constant" not in blocker)
    return ModelSummary(scorer.target.name, serial, merge, overlap, priced, blocked + infeasible,
                        _schedule_summary(scorer, groups))


def _schedule_summary(scorer: CostScorer, groups: tuple[Group, ...]) -> dict[str, Any]:
    """The original as QNN schedules it, replayed; what the chosen groups save in that replay."""
    judge = scorer.schedule_judge()
    if judge is None:
        return {}
    counts = judge.schedule.counts()
    saved = sum(g.verdict.details.get("schedule.t2_ns", 0.0) - g.verdict.details.get("schedule.t4_ns", 0.0)
                for g in groups if "schedule.t4_ns" in g.verdict.details)
    return {"replay_us": round(judge.original.latency_ns / 1e3, 3), "main_busy_us": round(judge.original.main_busy_ns / 1e3, 3),
            "hvx_busy_us": round(judge.original.hvx_busy_ns / 1e3, 3), "hvx_threads": scorer.target.hvx_contexts,
            "qnn_ops": counts["ops"], "hvx_ops": counts["vec"], "hmx_ops": counts["hmx"],
            "hvx_beside_hmx": counts["hvx_beside_hmx"], "estimated_share": round(judge.estimated_share, 4),
            "saved_us": round(saved / 1e3, 3)}

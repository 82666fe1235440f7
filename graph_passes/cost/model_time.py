"""Predicted time of a whole model, fused or not: what ``--micro-batches`` compares.

    model = Σ unfused tasks  (alone, whole HVX pool and VTCM, + one dispatch per compute op: baseline 1)
          + Σ fused groups   (t4: one entry, tasks side by side under the chosen quota)
          + HMX row padding  (every matrix op: rows below a multiple of the tile still occupy whole tiles)

The group scorer compares tasks of one model, whose matrix ops keep their row counts, so it can leave
row padding out. A split changes row counts: 16 tokens fill half of a 32-row HMX tile, 8 tokens a
quarter, so each slice's MatMul costs what the whole one did and the split doubles HMX time. Pricing
the padding on both sides keeps the unsplit model wherever that, the extra dispatches of the copies
and the Split/Concat movement (priced as the DMA tasks they are) outweigh what fusing the slices saves.
Views and constants cost nothing and are the same on both sides; opaque ops never split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hexfuse.graph_passes.cost.baselines import alone_plan, overhead_ns
from hexfuse.graph_passes.cost.opcost import TaskCost, compute_nodes
from hexfuse.graph_passes.cost.scorer import CostScorer
from hexfuse.graph_passes.cost.simulate import Infeasible, simulate
from hexfuse.graph_passes.select.balance import Verdict
from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec

_ROW_MAJOR = ("MatMul", "Gemm", "MatMulInteger", "QLinearMatMul")
_MATRIX = (*_ROW_MAJOR, "Conv", "ConvInteger", "QLinearConv", "ConvTranspose")


@dataclass(frozen=True)
class ModelTime:
    total_ns: float
    unfused_ns: float  # tasks left alone
    fused_ns: float  # fused groups
    padding_ns: float  # HMX row padding, all matrix ops
    dispatches: int  # graph ops the runtime sequences (a fused group is one)

    def describe(self) -> str:
        return (f"{self.total_ns / 1e3:.1f} us ({self.dispatches} dispatches, HMX row padding "
                f"{self.padding_ns / 1e3:.1f} us)")


def _rows(node: NodeSpec, op: FusedOp) -> int:
    shape = op.tensor(node.outputs[0]).shape if node.outputs else ()
    if not shape:
        return 0
    if node.op_type in _ROW_MAJOR:
        return math.prod(shape[:-1])
    return shape[0] * math.prod(shape[2:])  # conv: batch x spatial positions


def row_padding_ns(op: FusedOp, costs: list[TaskCost], tile: int) -> float:
    """HMX time spent on the padded rows of the op's matrix tasks.

    Task costs are shared between tasks of equal structure (their op names may be another task's), so
    matrix nodes are paired with their costs by position, not by name."""
    extra = 0.0
    for task, cost in zip(op.tasks, costs):
        nodes = [n for n in compute_nodes(task) if n.op_type in _MATRIX]
        priced = [c for c in cost.ops if c.op_type in _MATRIX]
        for node, op_cost in zip(nodes, priced):
            rows = _rows(node, op) if op_cost.engine == "hmx" else 0
            if rows > 0:
                efficiency = rows / (math.ceil(rows / tile) * tile)
                extra += op_cost.main_ns * (1.0 / efficiency - 1.0)
    return extra


def _alone_ns(costs: list[TaskCost], scorer: CostScorer) -> float:
    target = scorer.target
    total = 0.0
    for cost in costs:
        try:
            total += simulate([alone_plan(cost, target)]).makespan
        except Infeasible:  # no tile fits VTCM: the runtime would spill; count the DDR round trip
            total += (cost.ddr_in + cost.ddr_out) / target.ddr_bytes_per_ns + cost.original.main_ns
    return total + overhead_ns(costs, target)


def model_time(groups: list[tuple[FusedOp, Verdict]], singles: list[FusedOp], scorer: CostScorer) -> ModelTime:
    """``groups``: the fused groups with their verdicts; ``singles``: one spec per task left unfused."""
    tile = scorer.target.hmx_tile
    unfused = fused = padding = 0.0
    dispatches = len(groups)
    for op in singles:
        costs = scorer.task_costs(op)[1]
        unfused += _alone_ns(costs, scorer)
        padding += row_padding_ns(op, costs, tile)
        dispatches += sum(c.dispatches for c in costs)
    for op, verdict in groups:
        costs = scorer.task_costs(op)[1]
        t4 = verdict.details.get("t4_fused_concurrent")
        fused += t4 if t4 is not None else scorer.predict(op).t4_fused_concurrent
        padding += row_padding_ns(op, costs, tile)
    return ModelTime(unfused + fused + padding, unfused, fused, padding, dispatches)

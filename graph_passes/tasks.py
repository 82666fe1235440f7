"""Tasks: convex, connected regions of units that run on one engine.

Units are visited in topological order; a unit joins the task of one of its predecessors when both
use the same engine (views and shape arithmetic, engine FREE, join any task) and the task stays
convex, i.e. no other predecessor of the unit is reachable from the task:

    T = {MatMul}                 MatMul ──> Reshape ──> MatMul'     one matrix task
                                 MatMul ──> Relu ──> MatMul'        three tasks (matrix, vector, matrix)
    T + u refused when           T ──> x ──> u  and  T ──> u        (x outside T: contracting T+u
                                                                     would create a cycle)
    no join across a fan-out     p ──> u1, p ──> u2                 (u1, u2 start tasks of their own:
                                                                     they are the independent branches)
Units that can never be fused (opaque ops, dynamic shapes) form no task. A lone Q or DQ (the
quantize at a graph input, the dequantize at an output) is a task of its own: joining it to a branch
would tie that branch to every other branch reading the same quantized tensor.
"""

from __future__ import annotations

from dataclasses import dataclass

from hexfuse.graph_passes.engines import FUSABLE_ENGINES, Engine
from hexfuse.graph_passes.reach import Reachability
from hexfuse.graph_passes.units import UnitGraph

MAX_TASK_UNITS = 64  # bounds the convexity check; a longer region is cut into several tasks


@dataclass(frozen=True)
class Task:
    id: int
    engine: Engine  # FREE for a task made only of views
    units: tuple[int, ...]  # unit positions, ascending

    @property
    def lo(self) -> int:
        return self.units[0]

    @property
    def hi(self) -> int:
        return self.units[-1]

    @property
    def fusable(self) -> bool:
        return self.engine in FUSABLE_ENGINES


def _joinable(engine: Engine, task_engine: Engine) -> bool:
    if engine is Engine.FREE:
        return True
    return engine is task_engine or task_engine is Engine.FREE


def _is_lone_qdq(graph: UnitGraph, flow_op_types: list[str], unit: int) -> bool:
    nodes = graph.units[unit].nodes
    return len(nodes) == 1 and flow_op_types[nodes[0]] in ("QuantizeLinear", "DequantizeLinear")


def build_tasks(graph: UnitGraph, reach: Reachability, op_types: list[str]) -> list[Task]:
    """``op_types`` lists the op type of every node, by node index."""
    task_of: list[int | None] = [None] * len(graph.units)
    members: list[list[int]] = []
    engines: list[Engine] = []
    for unit in graph.units:
        if unit.blocker is not None or unit.engine is Engine.OPAQUE:
            continue
        preds = graph.predecessors[unit.position]
        chosen = None
        lone = _is_lone_qdq(graph, op_types, unit.position)
        for pred in () if lone else preds:
            task = task_of[pred]
            if task is None or len(members[task]) >= MAX_TASK_UNITS or _is_lone_qdq(graph, op_types, pred):
                continue
            if len(graph.successors[pred]) > 1:
                continue
            if not _joinable(unit.engine, engines[task]):
                continue
            others = [p for p in preds if task_of[p] != task]
            if reach.first_path(members[task], others) is None:
                chosen = task
                break
        if chosen is None:
            chosen = len(members)
            members.append([])
            engines.append(unit.engine)
        elif engines[chosen] is Engine.FREE:
            engines[chosen] = unit.engine  # a view chain takes the engine of the work joining it
        members[chosen].append(unit.position)
        task_of[unit.position] = chosen
    return [Task(i, engines[i], tuple(sorted(units))) for i, units in enumerate(members)]

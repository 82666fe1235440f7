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

from itertools import count as count_from
from typing import NamedTuple

from hexfuse.graph_passes.analysis.reach import Reachability
from hexfuse.graph_passes.analysis.units import UnitGraph
from hexfuse.graph_passes.engines.classify import FUSABLE_ENGINES, Engine

MAX_TASK_UNITS = 64  # bounds the convexity check; a longer region is cut into several tasks


class Task(NamedTuple):
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


def build_tasks(graph: UnitGraph, reach: Reachability, op_types: list[str]) -> list[Task]:
    """``op_types`` lists the op type of every node, by node index."""
    count = len(graph)
    qdq = ("QuantizeLinear", "DequantizeLinear")
    lone = ([len(nodes) == 1 and op_types[nodes[0]] in qdq for nodes in graph.nodes]
            if any(op in qdq for op in set(op_types)) else [False] * count)
    task_of: list[int | None] = [None] * count
    members: list[list[int]] = []
    engines: list[Engine] = []
    free, opaque = Engine.FREE, Engine.OPAQUE
    unit_engines, blockers, predecessors, successors = graph.engine, graph.blocker, graph.predecessors, graph.successors
    for position in range(count):
        engine = unit_engines[position]
        if blockers[position] is not None or engine is opaque:
            continue
        preds = predecessors[position]
        chosen = None
        for pred in () if lone[position] else preds:
            task = task_of[pred]
            if task is None or len(members[task]) >= MAX_TASK_UNITS or lone[pred]:
                continue
            if len(successors[pred]) > 1:
                continue
            joined = engines[task]  # joinable: views join anything, anything joins views, else one engine
            if not (engine is free or joined is engine or joined is free):
                continue
            if len(preds) == 1:  # the usual unit: nothing else could lead back into the task
                chosen = task
                break
            others = [p for p in preds if task_of[p] != task]
            if not others or reach.first_path(members[task], others) is None:
                chosen = task
                break
        if chosen is None:
            chosen = len(members)
            members.append([])
            engines.append(engine)
        elif engines[chosen] is free:
            engines[chosen] = engine  # a view chain takes the engine of the work joining it
        members[chosen].append(position)
        task_of[position] = chosen
    return list(map(Task._make, zip(count_from(), engines, map(tuple, members))))  # positions came in ascending

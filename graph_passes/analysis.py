"""Everything the pass knows about one model, computed once: units, reachability, tasks, buffers."""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from hexfuse.graph_passes.dataflow import Dataflow
from hexfuse.graph_passes.engines import Engine
from hexfuse.graph_passes.hazards import BufferMap, Buffers, task_buffers
from hexfuse.graph_passes.qdq_boundary import Peeled, claim_blocker, peel
from hexfuse.graph_passes.reach import Reachability
from hexfuse.graph_passes.tasks import Task, build_tasks
from hexfuse.graph_passes.units import UnitGraph, build_units
from hexfuse.graph_passes.work import Work, node_work


@dataclass
class Analysis:
    flow: Dataflow
    units: UnitGraph
    reach: Reachability
    tasks: list[Task]
    _buffers: BufferMap = field(repr=False)
    _buffer_cache: dict[int, Buffers] = field(default_factory=dict, repr=False)
    _work_cache: dict[int, Work] = field(default_factory=dict, repr=False)
    _nodes_cache: dict[int, list[int]] = field(default_factory=dict, repr=False)
    _body_cache: dict[int, Peeled] = field(default_factory=dict, repr=False)
    _claim_cache: dict[int, str | None] = field(default_factory=dict, repr=False)
    task_specs: dict[int, object] = field(default_factory=dict, repr=False)  # spec_builder's caches
    tensor_specs: dict[str, object] = field(default_factory=dict, repr=False)
    task_keys: dict[int, tuple] = field(default_factory=dict, repr=False)

    @staticmethod
    def of(inferred: onnx.ModelProto, supported_ops: frozenset[str] | None = None) -> Analysis:
        flow = Dataflow.of(inferred)
        units = build_units(flow, supported_ops)
        reach = Reachability(units.successors)
        tasks = build_tasks(units, reach, [node.op_type for node in flow.nodes])
        return Analysis(flow, units, reach, tasks, BufferMap(flow))

    def task_nodes(self, task: Task) -> list[int]:
        """Node indices of a task, in the graph's topological order."""
        nodes = self._nodes_cache.get(task.id)
        if nodes is None:
            nodes = self._nodes_cache[task.id] = sorted(i for unit in task.units for i in self.units.units[unit].nodes)
        return nodes

    def task_body(self, task: Task) -> Peeled:
        """The task's nodes split into function body and boundary DQ/Q left outside (qdq_boundary.py)."""
        cached = self._body_cache.get(task.id)
        if cached is None:
            cached = self._body_cache[task.id] = peel(self.flow, self.task_nodes(task))
        return cached

    def claim_blocker(self, task: Task) -> str | None:
        """Why a fused node holding this task would not be claimed by the QNN EP (qdq_boundary.py)."""
        if task.id not in self._claim_cache:
            self._claim_cache[task.id] = claim_blocker(self.flow, self.task_nodes(task))
        return self._claim_cache[task.id]

    def level_range(self, task: Task) -> tuple[int, int]:
        """Lowest and highest ASAP level of the task's units."""
        levels = [self.units.units[unit].level for unit in task.units]
        return min(levels), max(levels)

    def node_label(self, index: int) -> str:
        node = self.flow.nodes[index]
        return f"{node.op_type} {node.name!r}"

    def unit_label(self, unit: int) -> str:
        return self.node_label(self.units.units[unit].core)

    def task_label(self, task: Task) -> str:
        return f"{task.engine.value} task at {self.unit_label(task.units[0])}" + (
            f" (+{len(task.units) - 1} units)" if len(task.units) > 1 else ""
        )

    def buffers(self, task: Task) -> Buffers:
        cached = self._buffer_cache.get(task.id)
        if cached is None:
            cached = task_buffers(self.flow, self._buffers, self.task_nodes(task))
            self._buffer_cache[task.id] = cached
        return cached

    def work(self, task: Task) -> Work:
        cached = self._work_cache.get(task.id)
        if cached is None:
            cached = Work()
            for index in self.task_nodes(task):
                cached = cached + node_work(self.flow, index)
            self._work_cache[task.id] = cached
        return cached

    def engine_histogram(self) -> dict[str, int]:
        counts = {engine.value: 0 for engine in Engine}
        for unit in self.units.units:
            counts[unit.engine.value] += 1
        return counts

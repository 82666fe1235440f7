"""Everything the pass knows about one model, computed once: units, reachability, tasks, buffers."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import onnx
from onnx import helper

from hexfuse.graph_passes.analysis.hazards import BufferMap, Buffers, task_buffers
from hexfuse.graph_passes.analysis.reach import Reachability
from hexfuse.graph_passes.analysis.tasks import Task, build_tasks
from hexfuse.graph_passes.analysis.units import UnitGraph, build_units
from hexfuse.graph_passes.backend import Backend, supported
from hexfuse.graph_passes.engines.classify import Decision, Engine, decide
from hexfuse.graph_passes.engines.engine_map import EngineMap
from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.graph.dataflow import Dataflow, overridable_initializers
from hexfuse.graph_passes.graph.flat import FlatGraph
from hexfuse.graph_passes.graph.qdq_boundary import Peeled, claim_blocker, peel
from hexfuse.graph_passes.graph.work import Work, node_work


@dataclass
class Analysis:
    flat: FlatGraph
    units: UnitGraph
    reach: Reachability
    tasks: list[Task]
    label: Callable[[int], str] = field(repr=False)  # node index -> how reports name it (labels.py)
    folds: frozenset[str] = frozenset()  # epilogue op types folded into matrix units (folds.py)
    backend: Backend | None = None  # what runs the fused nodes can do (backend.py)
    engine_map: EngineMap | None = None  # what QNN schedules per node today (engine_map.py)
    htp: bool = False  # non-matrix tasks run as HVX task ops (QNN HTP): no DMA class
    _buffer_cache: dict[int, Buffers] = field(default_factory=dict, repr=False)
    _work_cache: dict[int, Work] = field(default_factory=dict, repr=False)
    _nodes_cache: dict[int, list[int]] = field(default_factory=dict, repr=False)
    _body_cache: dict[int, Peeled] = field(default_factory=dict, repr=False)
    _claim_cache: dict[int, str | None] = field(default_factory=dict, repr=False)
    _backend_verdicts: dict[int, str | None] = field(default_factory=dict, repr=False)  # by structures.code
    _levels: dict[int, tuple[int, int]] = field(default_factory=dict, repr=False)
    task_specs: dict[int, object] = field(default_factory=dict, repr=False)  # spec_builder's caches
    tensor_specs: dict[str, object] = field(default_factory=dict, repr=False)
    quant_specs: dict[int, object] = field(default_factory=dict, repr=False)  # by tensor
    node_quant_specs: dict[int, object] = field(default_factory=dict, repr=False)  # by Q/DQ node

    @staticmethod
    def of(model: onnx.ModelProto, backend: Backend | None = None, *, folds: frozenset[str] = frozenset(),
           typed: onnx.GraphProto | None = None, aliases: Mapping[str, str] | None = None,
           label: Callable[[int], str] | None = None, flat: FlatGraph | None = None,
           engine_map: EngineMap | None = None) -> Analysis:
        """``model``: sorted nodes; its own value_info types them unless ``typed`` (an inferred graph,
        with ``aliases`` for tensors only the model has) does. ``label`` names nodes in reasons;
        ``engine_map``: QNN's kernels per node (a map is HTP evidence: the HTP rules apply with it)."""
        flat = flat or FlatGraph.build(model, typed, aliases)
        label = label or _default_label(flat)
        htp = engine_map is not None or runs_on_htp(backend)
        units = build_units(flat, supported(backend), folds, label, htp)
        reach = Reachability(units.successors)
        tasks = build_tasks(units, reach, flat.op_types)
        return Analysis(flat, units, reach, tasks, label, folds, backend, engine_map, htp)

    def decision(self, index: int) -> Decision:
        """Engine class, occupied resource and deciding source of node ``index`` (engines.decide)."""
        flat = self.flat
        facts = self.engine_map.node(flat.node_names[index]) if self.engine_map is not None else None
        return decide(flat.op_types[index], flat.domains[index], facts, self.htp)

    @cached_property
    def flow(self) -> Dataflow:
        """The protobuf-keyed view (calibration and other readers that want names, not ids)."""
        flat = self.flat
        types = {flat.names[t]: info.type for t, info in flat.type_source.items()}
        for init in flat.model.graph.initializer:
            types.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
        return Dataflow(flat.model.graph, types, overridable_initializers(flat.model))

    @cached_property
    def structures(self):
        """Structure keys of tasks and groups (structure.py), shared by selection and naming."""
        from hexfuse.graph_passes.analysis.structure import Structures  # structure.py builds on this module

        return Structures(weakref.proxy(self))  # no reference cycle: see pipeline.gc_paused

    def task_nodes(self, task: Task) -> list[int]:
        """Node indices of a task, in the graph's topological order."""
        nodes = self._nodes_cache.get(task.id)
        if nodes is None:
            unit_nodes, units = self.units.nodes, task.units
            nodes = self._nodes_cache[task.id] = (list(unit_nodes[units[0]]) if len(units) == 1  # sorted already
                                                  else sorted(i for unit in units for i in unit_nodes[unit]))
        return nodes

    def task_node_arrays(self, tasks: Sequence[Task]) -> tuple[np.ndarray, np.ndarray]:
        """``task_nodes`` of many tasks as one ragged array (offsets, node indices), computed at once."""
        task_ptr, task_units = ragged.from_rows([task.units for task in tasks])
        nodes, owner = ragged.take(*self._unit_arrays, task_units)
        task_of = np.repeat(np.arange(len(tasks), dtype=np.int64), np.diff(task_ptr))[owner]
        order = np.lexsort((nodes, task_of))  # per task, in the graph's topological order
        return ragged.segments(task_of[order], len(tasks)), nodes[order]

    @cached_property
    def _unit_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Every unit's nodes as one ragged array."""
        return ragged.from_rows(self.units.nodes)

    def task_bodies(self, tasks: Sequence[Task]) -> tuple[np.ndarray, np.ndarray]:
        """``task_body(task).body`` of many tasks as one ragged array (offsets, node indices)."""
        if not self.has_qdq:  # nothing to peel: the body is every node of the task
            return self.task_node_arrays(tasks)
        return ragged.from_rows([self.task_body(task).body for task in tasks])

    def task_body(self, task: Task) -> Peeled:
        """The task's nodes split into function body and boundary DQ/Q left outside (qdq_boundary.py)."""
        cached = self._body_cache.get(task.id)
        if cached is None:
            nodes = self.task_nodes(task)
            cached = self._body_cache[task.id] = peel(self.flat, nodes) if self.has_qdq else Peeled(tuple(nodes), (), ())
        return cached

    def claim_blocker(self, task: Task) -> str | None:
        """Why a fused node holding this task would not run as such: the QNN EP would not claim it
        (qdq_boundary.py), or the backend refuses the task (backend.py)."""
        return self.claim_blockers((task,))[0]

    def claim_blockers(self, tasks: Sequence[Task]) -> list[str | None]:
        """``claim_blocker`` of many tasks; the backend is asked once per code structure (its check plans
        the task: costly, and equal code gets the same verdict). A matrix refusal names nodes: asked again."""
        from hexfuse.graph_passes.spec.builder import fused_op_spec  # spec_builder imports this module

        cache = self._claim_cache
        todo = [task for task in tasks if task.id not in cache]
        if self.has_qdq:
            reasons = {task.id: claim_blocker(self.flat, self.task_nodes(task), self.task_body(task)) for task in todo}
            asked = [task for task in todo if reasons[task.id] is None]
        else:  # every port is float: the EP claims any task
            reasons, asked = dict.fromkeys([task.id for task in todo]), todo
        check = self.backend.task_check if self.backend is not None else None
        if check is not None and asked:
            verdicts, unseen, matrix = self._backend_verdicts, object(), Engine.MATRIX
            for task, code in zip(asked, self.structures.codes(asked)):
                verdict = verdicts.get(code, unseen)
                if verdict is unseen or (verdict is not None and task.engine is matrix):
                    verdict = verdicts[code] = check(fused_op_spec(self, (task,)))
                reasons[task.id] = verdict
        cache.update(reasons)
        return [cache[task.id] for task in tasks]

    @cached_property
    def has_qdq(self) -> bool:
        """Quantized tensors anywhere (else every port is float and the EP's boundary rule holds)."""
        return any(op in ("QuantizeLinear", "DequantizeLinear") for op, _ in self.flat.op_table[0])

    def level_range(self, task: Task) -> tuple[int, int]:
        """Lowest and highest ASAP level of the task's units."""
        cached = self._levels.get(task.id)
        if cached is None:
            levels = [self.units.level[unit] for unit in task.units]
            cached = self._levels[task.id] = (min(levels), max(levels))
        return cached

    def node_label(self, index: int) -> str:
        return self.label(index)

    def unit_label(self, unit: int) -> str:
        return self.label(self.units.core[unit])

    def task_label(self, task: Task) -> str:
        return f"{task.engine.value} task at {self.unit_label(task.units[0])}" + (
            f" (+{len(task.units) - 1} units)" if len(task.units) > 1 else ""
        )

    @cached_property
    def buffer_map(self) -> BufferMap:
        return BufferMap(self.flat)

    def buffers(self, task: Task) -> Buffers:
        cached = self._buffer_cache.get(task.id)
        if cached is None:
            cached = self._buffer_cache[task.id] = task_buffers(self.flat, self.buffer_map, self.task_nodes(task))
        return cached

    def work(self, task: Task) -> Work:
        cached = self._work_cache.get(task.id)
        if cached is None:
            cached = Work()
            for index in self.task_nodes(task):
                cached = cached + node_work(self.flat, index)
            self._work_cache[task.id] = cached
        return cached

    def engine_histogram(self) -> dict[str, int]:
        counts = {engine.value: 0 for engine in Engine}
        for engine in self.units.engine:
            counts[engine.value] += 1
        return counts


def runs_on_htp(backend: Backend | None) -> bool:
    """The backend runs fused ops on QNN's HTP (op_package/__init__.py names it 'qnn-htp')."""
    return backend is not None and backend.name.startswith("qnn-htp")


def _default_label(flat: FlatGraph) -> Callable[[int], str]:
    def label(index: int) -> str:
        name = flat.node_names[index]
        return f"{flat.op_types[index]} {name!r}" if name else f"#{index} {flat.op_types[index]}"
    return label

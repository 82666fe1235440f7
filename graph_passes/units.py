"""Node units: the smallest pieces the pass moves, each tagged with its engine.

A QDQ unit is one compute op together with the DequantizeLinear nodes that feed only it and the
QuantizeLinear node that alone reads its output:

    DQ(x) ──┐
    DQ(w) ──┼─> Conv ──> Q        one unit, engine of Conv (matrix)
    DQ(b) ──┘

Every other node is a unit of its own. Units are convex by construction (a DQ has one consumer, the
Q one producer), so a set of whole units is convex whenever the unit graph says so.

Units are numbered in a topological order sorted by ASAP level: nodes that become ready at the same
time sit next to each other, which keeps independent branches inside the reachability window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx

from hexfuse.graph_passes.dataflow import Dataflow
from hexfuse.graph_passes.engines import FUSABLE_ENGINES, Engine, engine_of

_QDQ = ("QuantizeLinear", "DequantizeLinear")
_SHAPE_DTYPES = ("int64", "int32")
_SHAPE_ARITHMETIC_MAX_ELEMENTS = 64


@dataclass(frozen=True)
class Unit:
    position: int  # index in the level-sorted topological order of units
    level: int  # ASAP level: longest path from a graph input, in units
    nodes: tuple[int, ...]  # node indices, topologically ordered
    core: int  # the node that decides the engine
    engine: Engine
    blocker: str | None  # why this unit may never be fused, or None

    @property
    def fusable(self) -> bool:
        return self.blocker is None and self.engine in FUSABLE_ENGINES


@dataclass(frozen=True)
class UnitGraph:
    units: tuple[Unit, ...]  # by position
    unit_of: tuple[int, ...]  # node index -> unit position
    successors: tuple[tuple[int, ...], ...]
    predecessors: tuple[tuple[int, ...], ...]


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _is_shape_arithmetic(flow: Dataflow, node: onnx.NodeProto) -> bool:
    for name in node.output:
        shape = flow.shape(name)
        if not name or shape is None or flow.types.get(name) is None:
            return False
        if flow.dtype(name) not in _SHAPE_DTYPES or math.prod(shape) > _SHAPE_ARITHMETIC_MAX_ELEMENTS:
            return False
    return True


def _constant_nodes(flow: Dataflow) -> list[bool]:
    """Nodes computed from initializers and constants alone: runtimes fold them, so they stay outside
    fused nodes (their outputs become static inputs) and never anchor a task."""
    constant_tensors = set(flow.initializers)  # IR<4 models list weights as inputs too: still weights
    result = []
    for node in flow.nodes:
        is_constant = node.domain in ("", "ai.onnx") and engine_of(node.op_type) is not Engine.OPAQUE and all(
            not name or name in constant_tensors for name in node.input
        )
        if is_constant:
            constant_tensors.update(node.output)
        result.append(is_constant)
    return result


def _engine_and_blocker(flow: Dataflow, nodes: list[int], core: int, constant: bool,
                        supported_ops: frozenset[str] | None) -> tuple[Engine, str | None]:
    node = flow.nodes[core]
    label = f"{node.op_type} {node.name!r}"
    if constant:
        return Engine.FREE, f"{label} computes a constant (folded by the runtime, kept outside fused nodes)"
    if _has_subgraph(node):
        return Engine.OPAQUE, f"{label} holds a subgraph (control flow is never fused)"
    engine = engine_of(node.op_type, node.domain)
    if engine is Engine.OPAQUE:
        domain = f" in domain {node.domain!r}" if node.domain else ""
        return engine, f"{label}{domain} is not an op hexfuse knows (treated as a barrier)"
    if engine is not Engine.FREE and _is_shape_arithmetic(flow, node):
        engine = Engine.FREE
    for index in nodes:
        op_type = flow.nodes[index].op_type
        if supported_ops is not None and op_type not in supported_ops:
            return engine, f"{label}: the backend has no kernel for {op_type} (left unfused)"
    for index in nodes:
        for name in (*flow.nodes[index].input, *flow.nodes[index].output):
            if name and flow.shape(name) is None:
                return engine, f"{label}: tensor {name!r} has no static shape"
    return engine, None


def _single_consumer(flow: Dataflow, name: str) -> int | None:
    users = flow.consumers.get(name, [])
    if len(users) != 1 or name in flow.graph_outputs:
        return None
    return users[0]


def _group_nodes(flow: Dataflow) -> list[list[int]]:
    """Partition node indices into units (lists of node indices); returns unit node lists by core."""
    nodes = flow.nodes
    owner = list(range(len(nodes)))  # node -> core node index
    for index, node in enumerate(nodes):
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx"):
            user = _single_consumer(flow, node.output[0])
            if user is not None and nodes[user].op_type not in _QDQ:
                owner[index] = user
        elif node.op_type == "QuantizeLinear" and node.domain in ("", "ai.onnx"):
            source = flow.producer.get(node.input[0])
            if source is None or nodes[source].op_type in _QDQ or len(nodes[source].output) != 1:
                continue
            params_static = all(not name or flow.constant_value(name) is not None for name in node.input[1:])
            if params_static and _single_consumer(flow, node.input[0]) == index:
                owner[index] = source
    members: dict[int, list[int]] = {}
    for index, core in enumerate(owner):
        members.setdefault(core, []).append(index)
    return [members[core] for core in sorted(members)]


def build_units(flow: Dataflow, supported_ops: frozenset[str] | None = None) -> UnitGraph:
    """Units of the model; ``supported_ops`` (the backend's capability table, None = no limit) bounds what may fuse."""
    groups = _group_nodes(flow)
    core_of_group = [next(i for i in group if flow.nodes[i].op_type not in _QDQ or len(group) == 1) for group in groups]
    group_of = [0] * len(flow.nodes)
    for gid, group in enumerate(groups):
        for index in group:
            group_of[index] = gid
    succ: list[set[int]] = [set() for _ in groups]
    for gid, group in enumerate(groups):
        for index in group:
            for name in flow.nodes[index].output:
                for user in flow.consumers.get(name, ()):
                    if group_of[user] != gid:
                        succ[gid].add(group_of[user])
    # ASAP levels over the group DAG. Sorting groups by their last node is a topological order: edges
    # leave a unit only from its last node (the op, or the Q that alone reads it).
    order = sorted(range(len(groups)), key=lambda g: groups[g][-1])
    level = [0] * len(groups)
    for gid in order:
        for user in succ[gid]:
            level[user] = max(level[user], level[gid] + 1)
    ranked = sorted(range(len(groups)), key=lambda g: (level[g], groups[g][-1]))
    position = [0] * len(groups)
    for pos, gid in enumerate(ranked):
        position[gid] = pos
    constant = _constant_nodes(flow)
    units = []
    for gid in ranked:
        is_constant = all(constant[i] for i in groups[gid])
        engine, blocker = _engine_and_blocker(flow, groups[gid], core_of_group[gid], is_constant, supported_ops)
        units.append(Unit(position[gid], level[gid], tuple(groups[gid]), core_of_group[gid], engine, blocker))
    successors = tuple(tuple(sorted(position[s] for s in succ[gid])) for gid in ranked)
    predecessors: list[list[int]] = [[] for _ in groups]
    for pos, users in enumerate(successors):
        for user in users:
            predecessors[user].append(pos)
    unit_of = tuple(position[group_of[i]] for i in range(len(flow.nodes)))
    return UnitGraph(tuple(units), unit_of, successors, tuple(tuple(p) for p in predecessors))

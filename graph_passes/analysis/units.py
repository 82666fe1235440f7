"""Node units: the smallest pieces the pass moves, each tagged with its engine.

A QDQ unit is one compute op together with the DequantizeLinear nodes that feed only it and the
QuantizeLinear node that alone reads its output; a matrix op also takes the epilogues its target
folds into it (folds.py):

    DQ(x) ──┐
    DQ(w) ──┼─> Conv ──> BatchNormalization ──> Q        one unit, engine of Conv (matrix)
    DQ(b) ──┘

Every other node is a unit of its own. Units are convex by construction (a DQ has one consumer, the
Q and each folded epilogue one producer whose only use they are), so a set of whole units is convex
whenever the unit graph says so.

Units are numbered in a topological order sorted by ASAP level: nodes that become ready at the same
time sit next to each other, which keeps independent branches inside the reachability window. Within
a level they go by output name, not by file position: the same graph written in another node order
gets the same units, partners and groups (by file position, gptj_block_qdq's predicted saving ranged
over 18.7-25.9 us across five topological orders of its nodes).
Everything is kept in flat lists indexed by unit position (``Unit`` objects are built on demand).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

import numpy as np
import onnx

from hexfuse.graph_passes.engines.classify import FUSABLE_ENGINES, Engine, engine_of, htp_engine
from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS, FlatGraph, constant_closure
from hexfuse.graph_passes.graph.folds import fold_source, host_marks

_QDQ = ("QuantizeLinear", "DequantizeLinear")
_SHAPE_DTYPES = ("int64", "int32")
_SHAPE_ARITHMETIC_MAX_ELEMENTS = 64
_CONTROL_FLOW_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


class Unit(NamedTuple):
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
    nodes: list[tuple[int, ...]]  # by position
    core: list[int]
    engine: list[Engine]
    blocker: list[str | None]
    level: list[int]
    unit_of: list[int]  # node index -> unit position
    successors: list[tuple[int, ...]]
    predecessors: list[tuple[int, ...]]

    def __len__(self) -> int:
        return len(self.nodes)

    @cached_property
    def units(self) -> tuple[Unit, ...]:
        return tuple(Unit(p, self.level[p], self.nodes[p], self.core[p], self.engine[p], self.blocker[p])
                     for p in range(len(self.nodes)))


def _single_consumer(flat: FlatGraph, tensor: int) -> int | None:
    users = flat.consumers[tensor]
    if len(users) != 1 or tensor in flat.graph_outputs:
        return None
    return users[0]


def _owners(flat: FlatGraph, folds: frozenset[str], constant: bytearray) -> list[int]:
    """Per node, the node whose unit it joins (itself for a unit's core). ``constant``: tensors
    computed from constants alone."""
    ops, producer, inputs = flat.op_types, flat.producer, flat.inputs
    owner = list(range(len(ops)))
    special = {*_QDQ, *folds}
    # matrix ops and the epilogues folded into them -> host op type (an epilogue only reads earlier
    # nodes, so every host can be known from the start)
    hosts = np.flatnonzero(host_marks(flat, constant)).tolist() if folds else []
    host_of: dict[int, str] = {index: ops[index] for index in hosts}
    dequantize = []
    visited = flat.op_marks(lambda op, domain: op in special and domain in ONNX_DOMAINS)
    for index in np.flatnonzero(visited).tolist():  # (the other nodes never join another's unit)
        op_type = ops[index]
        if op_type == "DequantizeLinear":
            dequantize.append(index)
        elif op_type == "QuantizeLinear":
            source = flat.producer[flat.inputs[index][0]]
            if source < 0 or ops[source] in _QDQ or len(flat.outputs[source]) != 1:
                continue
            params_static = all(t < 0 or flat.is_constant(t) for t in flat.inputs[index][1:])
            if params_static and _single_consumer(flat, flat.inputs[index][0]) == index:
                owner[index] = owner[source]
        elif any(t >= 0 and producer[t] in host_of for t in inputs[index]):  # else nothing to fold into
            source = fold_source(flat, index, host_of, folds, constant)
            if source is not None:
                owner[index] = owner[source]
                host_of[index] = host_of[source]
    for index in dequantize:  # a DQ joins its consumer's unit, wherever that unit is rooted
        user = _single_consumer(flat, flat.outputs[index][0])
        if user is not None and ops[user] not in _QDQ:
            owner[index] = owner[user]
    return owner


def _group_nodes(flat: FlatGraph, folds: frozenset[str], constant: bytearray) -> tuple[np.ndarray, np.ndarray]:
    """Partition node indices into units, ordered by core, as a ragged array (offsets, node indices;
    each unit's nodes ascending)."""
    owner = np.array(_owners(flat, folds, constant), dtype=np.int64)
    members = np.argsort(owner, kind="stable")
    cores = owner[members]
    starts = np.flatnonzero(np.concatenate(([True], cores[1:] != cores[:-1]))) if len(cores) else cores
    return np.append(starts, len(cores)), members


def _constant_nodes(flat: FlatGraph, engines: dict[tuple[str, str], Engine]) -> tuple[bytearray, bytearray]:
    """(nodes, tensors) computed from initializers and constants alone: runtimes fold them, so such
    nodes stay outside fused nodes (their outputs become static inputs) and never anchor a task.
    IR<4 models list weights as inputs too: still weights."""
    known = flat.op_marks(lambda *op: engines[op] is not Engine.OPAQUE)
    return constant_closure(flat, bytearray(flat.initializer), known)


class _Blockers:
    """Why a unit may never be fused (or None), with per-type facts computed once per distinct type."""

    def __init__(self, flat: FlatGraph, supported_ops: frozenset[str] | None, label: Callable[[int], str]) -> None:
        self.flat, self.supported_ops, self.label = flat, supported_ops, label
        self.static_shape = [kind.shape is not None for kind in flat.types]
        self.empty = [kind.shape is not None and kind.elements == 0 for kind in flat.types]  # a static 0 dimension
        self.shape_like = [kind.dtype in _SHAPE_DTYPES and kind.shape is not None
                           and kind.elements <= _SHAPE_ARITHMETIC_MAX_ELEMENTS for kind in flat.types]
        self.first_bad_port = self._first_bad_ports()
        self.shadowed = self._shadowed()

    def _shadowed(self) -> dict[int, str]:
        """Nodes writing a name a subgraph also defines -> that name. Moved before the node whose subgraph
        defines it (a fused node takes its first node's place), the name would be defined twice in scope."""
        flat, found = self.flat, {}
        for name in sorted(flat.subgraph_names):
            tensor = flat.ids.get(name)
            if tensor is not None and flat.producer[tensor] >= 0:
                found.setdefault(flat.producer[tensor], name)
        return found

    def _first_bad_ports(self) -> np.ndarray:
        """Per node, the position in ``flat.port_arrays`` of its first port without a static shape or
        with a static 0 dimension (-1: none), for all nodes at once."""
        flat = self.flat
        port_ptr, port_ids, _ = flat.port_arrays
        kinds = np.array(flat.type_of, dtype=np.int64)[port_ids] if len(port_ids) else np.zeros(0, dtype=np.int64)
        fine = np.append(np.array(self.static_shape, dtype=bool) & ~np.array(self.empty, dtype=bool), False)  # [-1]: unknown
        bad = np.flatnonzero((port_ids >= 0) & ~fine[kinds])
        first = np.full(flat.node_count, -1, dtype=np.int64)
        owners, at = np.unique(np.searchsorted(port_ptr, bad, side="right") - 1, return_index=True)
        first[owners] = bad[at]
        return first

    def is_shape_arithmetic(self, index: int) -> bool:
        for tensor in self.flat.outputs[index]:
            kind = self.flat.type_of[tensor] if tensor >= 0 else -1
            if kind < 0 or not self.shape_like[kind]:
                return False
        return True

    def of_units(self, group_ptr: np.ndarray, members: np.ndarray, member_unit: np.ndarray, cores: np.ndarray,
                 constant: np.ndarray, engines: dict[tuple[str, str], Engine]) -> tuple[list[Engine], list[str | None]]:
        """``of`` for every unit (ragged members, per unit its core and whether it is constant), as array
        steps; ``of`` itself words the units that have a blocker."""
        flat = self.flat
        ops, op_index = flat.op_table
        engine_list = [engines[op] for op in ops]
        core_engines = op_index[cores]
        opaque = np.array([engine is Engine.OPAQUE for engine in engine_list], dtype=bool)[core_engines]
        worded = constant | opaque
        faulty = self.first_bad_port >= 0
        if self.supported_ops is not None:
            faulty |= flat.op_marks(lambda op, _: op not in self.supported_ops)
        faulty[list(self.shadowed)] = True
        np.logical_or.at(worded, member_unit, faulty[members])
        free = np.array([engine is Engine.FREE for engine in engine_list], dtype=bool)[core_engines]
        to_free = ~free & self._shape_arithmetic()[cores]
        result = [engine_list[code] for code in core_engines.tolist()]
        for unit in np.flatnonzero(to_free & ~worded).tolist():
            result[unit] = Engine.FREE
        blockers: list[str | None] = [None] * len(result)
        for unit in np.flatnonzero(worded).tolist():
            nodes = members[group_ptr[unit]:group_ptr[unit + 1]].tolist()
            result[unit], blockers[unit] = self.of(nodes, int(cores[unit]), result[unit], bool(constant[unit]))
        return result, blockers

    def _shape_arithmetic(self) -> np.ndarray:
        """``is_shape_arithmetic`` of every node."""
        flat = self.flat
        ports = flat.port_arrays[1]
        node_of, is_input = flat.port_owners
        is_output = ~is_input
        like = np.append(np.array(self.shape_like, dtype=bool), False)  # [-1]: unknown type
        kinds = np.array(flat.type_of, dtype=np.int64)[ports[is_output]]
        fine = like[np.where(ports[is_output] >= 0, kinds, -1)]
        result = np.ones(flat.node_count, dtype=bool)
        np.logical_and.at(result, node_of[is_output], fine)
        return result

    def of(self, nodes: list[int], core: int, engine: Engine, constant: bool) -> tuple[Engine, str | None]:
        flat = self.flat
        if constant:
            return Engine.FREE, f"{self.label(core)} computes a constant (folded by the runtime, kept outside fused nodes)"
        if engine is Engine.OPAQUE:
            node = flat.node(core)
            if any(a.type in _CONTROL_FLOW_TYPES for a in node.attribute):
                return engine, f"{self.label(core)} holds a subgraph (control flow is never fused)"
            domain = f" in domain {node.domain!r}" if node.domain else ""
            return engine, f"{self.label(core)}{domain} is not an op hexfuse knows (treated as a barrier)"
        if engine is not Engine.FREE and self.is_shape_arithmetic(core):
            engine = Engine.FREE
        if self.supported_ops is not None:
            for index in nodes:
                if flat.op_types[index] not in self.supported_ops:
                    return engine, f"{self.label(core)}: the backend has no kernel for {flat.op_types[index]} (left unfused)"
        for index in nodes:
            if index in self.shadowed:
                return engine, (f"{self.label(core)}: writes {self.shadowed[index]!r}, a name a subgraph also defines "
                                "(kept in its place)")
        first_bad = self.first_bad_port
        for index in nodes:
            if first_bad[index] >= 0:
                tensor = int(flat.port_arrays[1][first_bad[index]])
                kind = flat.type_of[tensor]
                if kind < 0 or not self.static_shape[kind]:
                    return engine, f"{self.label(core)}: tensor {flat.names[tensor]!r} has no static shape"
                # static, not dynamic: just nothing to compute
                return engine, f"{self.label(core)}: tensor {flat.names[tensor]!r} is empty (a 0 dimension)"
        return engine, None


def _group_successors(flat: FlatGraph, count: int, group_of: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """Per group, the groups reading its outputs (ascending, each once), as a ragged array; ``group_of``:
    node -> group (None: every node is its own group)."""
    ports = flat.port_arrays[1]
    node_of, is_input = flat.port_owners
    written = ~is_input & (ports >= 0)
    users, pair = ragged.take(*flat.consumer_arrays, ports[written])
    sources = node_of[written][pair]
    if group_of is not None:
        sources, users = group_of[sources], group_of[users]
        crossing = sources != users
        sources, users = sources[crossing], users[crossing]
    width = max(count, 1)
    keys = ragged.distinct(sources * width + users)
    return ragged.segments(keys // width, count), keys % width


def _cores(flat: FlatGraph, group_ptr: np.ndarray, members: np.ndarray, member_unit: np.ndarray) -> np.ndarray:
    """Per unit, its core: the first member that is not a Q or DQ, else its first member."""
    qdq = flat.op_marks(lambda op, _: op in _QDQ)
    cores = members[group_ptr[:-1]].copy()
    plain = np.flatnonzero(~qdq[members])
    units, first = np.unique(member_unit[plain], return_index=True)  # each unit's first plain member
    cores[units] = members[plain[first]]
    return cores


def _sorted_rows(ptr: np.ndarray, values: np.ndarray) -> list[tuple[int, ...]]:
    """A ragged array as a list of tuples, each row sorted."""
    owner = np.repeat(np.arange(len(ptr) - 1, dtype=np.int64), np.diff(ptr))
    return ragged.tuples(ptr, values[np.lexsort((values, owner))])


def _name_ranks(flat: FlatGraph, nodes: np.ndarray) -> np.ndarray:
    """Per node of ``nodes``, the rank of its output names among theirs. Output names are unique and do
    not move with the node, so ranking by them gives the same graph the same unit positions (and so
    the same partners and groups) in whatever order its exporter wrote the nodes."""
    names, outputs = flat.names, flat.outputs
    keys = ["\0".join([names[t] for t in outputs[node] if t >= 0]) for node in nodes.tolist()]
    rank = np.empty(len(keys), dtype=np.int64)
    rank[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys), dtype=np.int64)
    return rank


def build_units(flat: FlatGraph, supported_ops: frozenset[str] | None = None, folds: frozenset[str] = frozenset(),
                label: Callable[[int], str] | None = None, htp: bool = False) -> UnitGraph:
    """Units of the model. ``supported_ops``: the backend's capability table (None = no limit);
    ``folds``: epilogue op types the target folds into matrix ops (folds.py); ``label`` names nodes;
    ``htp``: non-matrix tasks run as HVX task ops (engines.htp_engine: no DMA class)."""
    label = label or (lambda index: f"#{index} {flat.op_types[index]}")
    ops = flat.op_types
    engines = {key: htp_engine(engine_of(*key)) if htp else engine_of(*key) for key in flat.op_table[0]}
    constant, constant_tensors = _constant_nodes(flat, engines)
    by_core_ptr, by_core_nodes = _group_nodes(flat, folds, constant_tensors)
    group_count = len(by_core_ptr) - 1
    group_of = None
    if group_count != len(ops):
        group_of = np.empty(len(ops), dtype=np.int64)
        group_of[by_core_nodes] = np.repeat(np.arange(group_count, dtype=np.int64), np.diff(by_core_ptr))
    succ_ptr, succ_values = _group_successors(flat, group_count, group_of)
    succ = succ_values.tolist()
    # ASAP levels over the group DAG. Groups are ordered by their last node, which is a topological
    # order: edges leave a unit only from its last node (the op, the Q or the epilogue that alone reads it).
    order = np.argsort(by_core_nodes[by_core_ptr[1:] - 1], kind="stable")
    level = [0] * group_count
    bounds = succ_ptr.tolist()
    for gid in order.tolist():
        next_level = level[gid] + 1
        for user in succ[bounds[gid]:bounds[gid + 1]]:
            if level[user] < next_level:
                level[user] = next_level
    level_array = np.array(level, dtype=np.int64)
    names = _name_ranks(flat, by_core_nodes[by_core_ptr[1:] - 1])  # of each unit's last node
    ranked_array = np.lexsort((names, level_array))  # by level, then by name
    position_array = np.empty(group_count, dtype=np.int64)
    position_array[ranked_array] = np.arange(group_count, dtype=np.int64)
    group_members, member_unit = ragged.take(by_core_ptr, by_core_nodes, ranked_array)  # units in rank order
    group_ptr = ragged.segments(member_unit, group_count)
    cores = _cores(flat, group_ptr, group_members, member_unit)
    constant_nodes = np.frombuffer(bytes(constant), dtype=np.uint8).astype(bool)
    is_constant = np.ones(group_count, dtype=bool)
    np.logical_and.at(is_constant, member_unit, constant_nodes[group_members])
    blockers = _Blockers(flat, supported_ops, label)
    unit_engines, unit_blockers = blockers.of_units(group_ptr, group_members, member_unit, cores, is_constant, engines)
    nodes = ragged.tuples(group_ptr, group_members)
    levels = level_array[ranked_array].tolist()
    ranked_succ, owner = ragged.take(succ_ptr, succ_values, ranked_array)
    targets = position_array[ranked_succ]
    successors = _sorted_rows(ragged.segments(owner, group_count), targets)
    by_target = np.lexsort((owner, targets))  # each unit's predecessors in ascending position
    predecessors = _sorted_rows(ragged.segments(targets[by_target], group_count), owner[by_target])
    unit_of = (position_array[group_of] if group_of is not None else position_array).tolist()
    return UnitGraph(nodes, cores.tolist(), unit_engines, unit_blockers, levels, unit_of, successors, predecessors)

"""Buffer hazards between tasks: RAW, WAR and WAW, seen through views.

Views (Reshape, Squeeze, Identity, ...) share storage with their input in the backends, so tensors
are first mapped to a *buffer*: the root of their view chain. A task writes the buffers of the
tensors it produces and reads the buffers of the tensors it consumes from outside. Two tasks may run
at the same time only if neither writes a buffer the other reads or writes.

ONNX is SSA, so on a well-formed graph a hazard implies a path and the reachability check already
refuses it; this check is the independent proof obligation for the buffer level (aliasing views,
graph inputs that are also outputs), and the reason string it returns names the buffer.
Tensors and buffers are tensor ids of the flat graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from hexfuse.graph_passes.engines.classify import VIEW_OPS
from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS, FlatGraph
from hexfuse.graph_passes.graph.ports import ports


class BufferMap:
    def __init__(self, flat: FlatGraph) -> None:
        parent: dict[int, int] = {}
        is_view = flat.op_marks(lambda op, domain: op in VIEW_OPS and domain in ONNX_DOMAINS)
        for index in np.flatnonzero(is_view).tolist():
            ins, outs = flat.inputs[index], flat.outputs[index]
            if ins and outs and ins[0] >= 0 and outs[0] >= 0:
                parent[outs[0]] = ins[0]
        roots: dict[int, int] = {}
        for tensor in parent:  # nodes are sorted, so a chain's root is resolved before the views on it
            root, seen = parent[tensor], 0
            while root in parent and seen <= len(parent):
                root = roots.get(root) if root in roots else parent[root]
                seen += 1
            roots[tensor] = root
        self._roots = roots

    def buffer(self, tensor: int) -> int:
        return self._roots.get(tensor, tensor)

    def root_array(self, count: int) -> np.ndarray:
        """Per tensor id below ``count``: its buffer."""
        roots = np.arange(count, dtype=np.int64)
        if self._roots:
            roots[np.fromiter(self._roots.keys(), dtype=np.int64)] = np.fromiter(self._roots.values(), dtype=np.int64)
        return roots


@dataclass(frozen=True)
class Buffers:
    reads: frozenset[int]
    writes: frozenset[int]


def task_buffers(flat: FlatGraph, buffers: BufferMap, node_indices: Sequence[int]) -> Buffers:
    roots = buffers._roots
    if len(node_indices) == 1:
        outs = flat.outputs[node_indices[0]]
        return Buffers(reads=frozenset(roots.get(t, t) for t in flat.inputs[node_indices[0]] if t >= 0 and t not in outs),
                       writes=frozenset(roots.get(t, t) for t in outs if t >= 0))
    produced = {t for i in node_indices for t in flat.outputs[i] if t >= 0}
    consumed = {t for i in node_indices for t in flat.inputs[i] if t >= 0 and t not in produced}
    return Buffers(
        reads=frozenset(roots.get(t, t) for t in consumed),
        writes=frozenset(roots.get(t, t) for t in produced),
    )


def hazard(first: Buffers, second: Buffers, names: Sequence[str]) -> str | None:
    """Why the two tasks conflict on a buffer, or None; ``names`` names the buffers (flat.names)."""
    for kind, left, right in (
        ("RAW", first.writes, second.reads),
        ("WAR", first.reads, second.writes),
        ("WAW", first.writes, second.writes),
    ):
        shared = left & right
        if shared:
            return f"{kind} hazard on buffer {min(names[t] for t in shared)!r}"
    return None


def any_hazard(flat: FlatGraph, buffers: BufferMap, task_nodes: tuple[np.ndarray, np.ndarray],
               pairs: Sequence[tuple[int, int]]) -> bool:
    """Whether any pair (i, j) of tasks has a hazard: ``task_buffers`` and ``hazard`` for many pairs at
    once, as array processing (the reasons come from ``hazard`` where this says yes). ``task_nodes``:
    the node indices of every task as one ragged array (offsets, nodes)."""
    if not pairs:
        return False
    count = len(flat.names)
    task_ptr, nodes = task_nodes
    tasks = len(task_ptr) - 1
    table = ports(flat, task_ptr, nodes)
    tensors, slot_task, writes, reads = table.tensors, table.part, table.writes, table.outside_reads(count)
    roots = buffers.root_array(count)
    by_task = {kind: ragged.segments(slot_task[mask], tasks) for kind, mask in (("r", reads), ("w", writes))}
    values = {"r": roots[tensors[reads]], "w": roots[tensors[writes]]}
    first, second = (np.array(side, dtype=np.int64) for side in zip(*pairs))

    def keyed(kind: str, tasks: np.ndarray) -> np.ndarray:  # (pair, buffer) as one key per buffer of the pair's task
        found, pair = ragged.take(by_task[kind], values[kind], tasks)
        return pair * count + found

    return any(_intersect(keyed(left, first), keyed(right, second))
               for left, right in (("w", "r"), ("r", "w"), ("w", "w")))


def _intersect(left: np.ndarray, right: np.ndarray) -> bool:
    """Whether two integer arrays share a value: ``np.isin(left, right).any()`` by one sort (np.isin
    calls np.unique, whose hash path is slow here: ragged.distinct)."""
    both = np.concatenate((ragged.distinct(left), ragged.distinct(right)))
    both.sort()
    return bool((both[1:] == both[:-1]).any())

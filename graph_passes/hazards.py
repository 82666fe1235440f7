"""Buffer hazards between tasks: RAW, WAR and WAW, seen through views.

Views (Reshape, Squeeze, Identity, ...) share storage with their input in the backends, so tensors
are first mapped to a *buffer*: the root of their view chain. A task writes the buffers of the
tensors it produces and reads the buffers of the tensors it consumes from outside. Two tasks may run
at the same time only if neither writes a buffer the other reads or writes.

ONNX is SSA, so on a well-formed graph a hazard implies a path and the reachability check already
refuses it; this check is the independent proof obligation for the buffer level (aliasing views,
graph inputs that are also outputs), and the reason string it returns names the buffer.
"""

from __future__ import annotations

from dataclasses import dataclass

from hexfuse.graph_passes.dataflow import Dataflow
from hexfuse.graph_passes.engines import VIEW_OPS


class BufferMap:
    def __init__(self, flow: Dataflow) -> None:
        parent: dict[str, str] = {}
        for node in flow.nodes:
            if node.op_type in VIEW_OPS and node.domain in ("", "ai.onnx") and node.input and node.output:
                parent[node.output[0]] = node.input[0]
        self._parent = parent

    def buffer(self, name: str) -> str:
        seen = 0
        while name in self._parent and seen <= len(self._parent):
            name = self._parent[name]
            seen += 1
        return name


@dataclass(frozen=True)
class Buffers:
    reads: frozenset[str]
    writes: frozenset[str]


def task_buffers(flow: Dataflow, buffers: BufferMap, node_indices: list[int]) -> Buffers:
    produced = {name for i in node_indices for name in flow.nodes[i].output if name}
    consumed = {name for i in node_indices for name in flow.nodes[i].input if name and name not in produced}
    return Buffers(
        reads=frozenset(buffers.buffer(name) for name in consumed),
        writes=frozenset(buffers.buffer(name) for name in produced),
    )


def hazard(first: Buffers, second: Buffers) -> str | None:
    """Why the two tasks conflict on a buffer, or None."""
    for kind, left, right in (
        ("RAW", first.writes, second.reads),
        ("WAR", first.reads, second.writes),
        ("WAW", first.writes, second.writes),
    ):
        shared = left & right
        if shared:
            return f"{kind} hazard on buffer {min(shared)!r}"
    return None

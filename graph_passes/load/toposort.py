"""Deterministic topological order of a graph's nodes, with a clear error on cycles."""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import onnx

from hexfuse.graph_passes.errors import HexfuseError


class CycleError(HexfuseError):
    """The graph is not a DAG; ``node_index`` is one node on (or behind) a cycle."""

    def __init__(self, node_index: int, message: str) -> None:
        super().__init__(message)
        self.node_index = node_index


def topological_order_of(inputs: Sequence[Sequence[str]], outputs: Sequence[Sequence[str]]) -> list[int]:
    """Kahn's algorithm over nodes given by their input/output tensor names.

    Ties are broken by the original index, so an already sorted graph keeps its order and the result
    never depends on hashing. Tensors nobody produces (graph inputs, initializers) are ready at once.
    """
    producer: dict[str, int] = {}
    for index, names in enumerate(outputs):
        for name in names:
            if name:
                producer[name] = index
    get = producer.get
    missing = [0] * len(inputs)
    users: list[list[int]] = [[] for _ in inputs]
    for index, names in enumerate(inputs):
        sources = set(map(get, names))  # each producer once; None: nobody produces it
        sources.discard(None)
        if index in sources:
            raise CycleError(index, f"graph has a cycle: node #{index} consumes its own output")
        missing[index] = len(sources)
        for source in sources:
            users[source].append(index)
    ready = [index for index, count in enumerate(missing) if count == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        index = heapq.heappop(ready)
        order.append(index)
        for user in users[index]:
            missing[user] -= 1
            if missing[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(inputs):
        stuck = min(index for index, count in enumerate(missing) if count > 0)
        raise CycleError(stuck, f"graph has a cycle through node #{stuck}")
    return order


def topological_order(graph: onnx.GraphProto, reads: Sequence[Sequence[str]], writes: Sequence[Sequence[str]]) -> list[int]:
    """``reads`` / ``writes``: each node's ``node_reads`` (subgraphs.py: outer-scope reads order a node
    like inputs) and outputs; ``graph`` words the error."""
    nodes = graph.node
    try:
        return topological_order_of(reads, writes)
    except CycleError as exc:
        node = nodes[exc.node_index]
        label = node.name or f"#{exc.node_index}"
        raise CycleError(exc.node_index, f"graph has a cycle through node {label!r} ({node.op_type})") from None

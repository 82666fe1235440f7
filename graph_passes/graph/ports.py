"""The ports of many nodes grouped into parts (tasks, or one node each), one row per port: the table
the array-processing stages (structure keys, buffer hazards, the rewrite's order check) start from."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.graph.flat import FlatGraph


@dataclass(frozen=True)
class Ports:
    """Rows in node order, each node's inputs before its outputs (flat.port_arrays)."""

    tensors: np.ndarray  # tensor id (-1: an omitted optional input)
    node: np.ndarray  # position of the port's node in the given node list
    part: np.ndarray  # the part that node belongs to
    rank: np.ndarray  # position among its node's ports
    is_input: np.ndarray  # bool
    port_counts: np.ndarray  # per node of the list: its number of ports
    input_counts: np.ndarray  # per node of the list: its number of inputs

    @property
    def valid(self) -> np.ndarray:
        return self.tensors >= 0

    @property
    def writes(self) -> np.ndarray:
        """Output ports (bool per row)."""
        return self.valid & ~self.is_input

    def outside_reads(self, tensor_count: int) -> np.ndarray:
        """Input ports reading a tensor no node of the same part writes (bool per row)."""
        writes = self.writes
        writer = np.full(tensor_count, -1, dtype=np.int64)  # (a tensor has one producer: one part)
        writer[self.tensors[writes]] = self.part[writes]
        return self.valid & self.is_input & (writer[np.where(self.valid, self.tensors, 0)] != self.part)


def ports(flat: FlatGraph, part_ptr: np.ndarray, nodes: np.ndarray) -> Ports:
    """The ports of ``nodes`` (node indices), where part i holds nodes[part_ptr[i]:part_ptr[i + 1]]."""
    port_ptr, port_ids, input_counts = flat.port_arrays
    tensors, node = ragged.take(port_ptr, port_ids, nodes)
    node_part = np.repeat(np.arange(len(part_ptr) - 1, dtype=np.int64), np.diff(part_ptr))
    port_counts = port_ptr[nodes + 1] - port_ptr[nodes]
    rank = np.arange(len(tensors), dtype=np.int64) - ragged.offsets(port_counts)[:-1][node]
    inputs = input_counts[nodes]
    return Ports(tensors, node, node_part[node], rank, rank < inputs[node], port_counts, inputs)

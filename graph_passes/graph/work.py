"""How much work a node does, from static shapes: MACs, output elements, bytes moved."""

from __future__ import annotations

import math
from dataclasses import dataclass

from hexfuse.graph_passes.graph.flat import FlatGraph


@dataclass(frozen=True)
class Work:
    macs: int = 0
    elements: int = 0
    bytes_moved: int = 0

    def __add__(self, other: Work) -> Work:
        return Work(self.macs + other.macs, self.elements + other.elements, self.bytes_moved + other.bytes_moved)


def _macs(flat: FlatGraph, index: int) -> int:
    op = flat.op_types[index]
    ins, out = flat.inputs[index], flat.shape(flat.outputs[index][0]) if flat.outputs[index] else None
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = flat.shape(ins[3] if op == "QLinearMatMul" else ins[0])
        if a is None or out is None or not a:
            return 0
        return math.prod(out) * a[-1]
    if op == "Gemm":
        a = flat.shape(ins[0])
        trans_a = next((attr.i for attr in flat.node(index).attribute if attr.name == "transA"), 0)
        if a is None or out is None or len(a) != 2:
            return 0
        return math.prod(out) * (a[0] if trans_a else a[1])
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        weight = flat.shape(ins[3] if op == "QLinearConv" else ins[1])
        if weight is None or out is None:
            return 0
        return math.prod(out) * math.prod(weight[1:])  # weight: (M, C/group, k...)
    if op == "ConvTranspose":
        weight, x = flat.shape(ins[1]), flat.shape(ins[0])
        if weight is None or x is None:
            return 0
        return math.prod(x) * math.prod(weight[1:])  # weight: (C, M/group, k...)
    return 0


def node_work(flat: FlatGraph, index: int) -> Work:
    types, type_of = flat.types, flat.type_of
    moved = sum(types[type_of[t]].nbytes for t in (*flat.inputs[index], *flat.outputs[index]) if t >= 0 and type_of[t] >= 0)
    elements = sum(types[type_of[t]].elements for t in flat.outputs[index] if t >= 0 and type_of[t] >= 0)
    return Work(macs=_macs(flat, index), elements=elements, bytes_moved=moved)

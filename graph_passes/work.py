"""How much work a node does, from static shapes: MACs, output elements, bytes moved."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from hexfuse.graph_passes.dataflow import Dataflow


@dataclass(frozen=True)
class Work:
    macs: int = 0
    elements: int = 0
    bytes_moved: int = 0

    def __add__(self, other: Work) -> Work:
        return Work(self.macs + other.macs, self.elements + other.elements, self.bytes_moved + other.bytes_moved)


def _size(flow: Dataflow, name: str) -> int:
    shape = flow.shape(name)
    return math.prod(shape) if shape is not None else 0


def _bytes(flow: Dataflow, name: str) -> int:
    if not name or flow.types.get(name) is None:
        return 0
    return _size(flow, name) * np.dtype(flow.dtype(name)).itemsize


def _macs(flow: Dataflow, node: onnx.NodeProto) -> int:
    op = node.op_type
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        a = flow.shape(node.input[3] if op == "QLinearMatMul" else node.input[0])
        out = flow.shape(node.output[0])
        if a is None or out is None or not a:
            return 0
        return math.prod(out) * a[-1]
    if op == "Gemm":
        a = flow.shape(node.input[0])
        out = flow.shape(node.output[0])
        trans_a = next((attr.i for attr in node.attribute if attr.name == "transA"), 0)
        if a is None or out is None or len(a) != 2:
            return 0
        return math.prod(out) * (a[0] if trans_a else a[1])
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        weight = flow.shape(node.input[3] if op == "QLinearConv" else node.input[1])
        out = flow.shape(node.output[0])
        if weight is None or out is None:
            return 0
        return math.prod(out) * math.prod(weight[1:])  # weight: (M, C/group, k...)
    if op == "ConvTranspose":
        weight = flow.shape(node.input[1])
        x = flow.shape(node.input[0])
        if weight is None or x is None:
            return 0
        return math.prod(x) * math.prod(weight[1:])  # weight: (C, M/group, k...)
    return 0


def node_work(flow: Dataflow, index: int) -> Work:
    node = flow.nodes[index]
    moved = sum(_bytes(flow, name) for name in (*node.input, *node.output))
    elements = sum(_size(flow, name) for name in node.output if name)
    return Work(macs=_macs(flow, node), elements=elements, bytes_moved=moved)

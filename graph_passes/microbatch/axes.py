"""Which axis of each output is the split axis, op by op, or why an op couples the slices.

A micro-batch split is exact when every op on the path treats rows of the split axis independently:
row r of each output depends on row r of the inputs only. This module answers that per node, given
the split axis of each input (None = the input is whole: a weight, or a tensor the split does not
reach):

    Relu, Add, Cast, Q/DQ ...      rows stay rows (broadcast: an unsplit operand must have size 1 there)
    MatMul  [.., M, K] x [K, N]    M (or a batch axis) splits; K is contracted: refused
            Q[M] x K^T[N] both split along different axes: every row meets every row (attention)
    Softmax / LayerNorm / Reduce*  fine across the split axis, refused over it
    Transpose, Reshape, Squeeze..  the axis moves; a Reshape must keep it as one whole axis
    Conv, pools                    batch axis only (windows couple neighbouring rows)
    BatchNormalization             inference form only (training form computes batch statistics)

Anything not listed is refused: an op we cannot vouch for is coupled until shown otherwise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from hexfuse.graph_passes.graph.dataflow import Dataflow

Axis = int | None


@dataclass(frozen=True)
class Step:
    """How a node carries the split: the split axis of each output, and for a Reshape the literal
    entry of its shape input that must become the slice size."""

    out_axes: tuple[Axis, ...]
    shape_entry: tuple[int, int] | None = None  # (input slot, index in the shape tensor)
    sliced_constants: tuple[tuple[int, int], ...] = ()  # (input slot, axis): a per-row constant, cut per slice


_ROWWISE = {
    "Abs", "Neg", "Reciprocal", "Sqrt", "Exp", "Log", "Ceil", "Floor", "Round", "Sign", "Erf", "Not",
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh",
    "IsNaN", "IsInf", "BitwiseNot", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid",
    "HardSwish", "Softplus", "Softsign", "Gelu", "Mish", "ThresholdedRelu", "Shrink", "Cast", "CastLike",
    "Identity", "Dropout",
}
_BROADCAST = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "Where", "PRelu", "Clip",
}
_NORMALIZE_LAST = {"Softmax": -1, "LogSoftmax": -1, "Hardmax": -1, "LayerNormalization": -1, "RMSNormalization": -1}
_REDUCE = {
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare",
}
_VIEWS = {"Reshape", "Squeeze", "Unsqueeze", "Flatten"}
_BATCH_ONLY = {
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool",
    "GlobalLpPool", "InstanceNormalization", "GroupNormalization", "DepthToSpace", "SpaceToDepth",
}


def _attr(node: onnx.NodeProto, name: str, default):
    for attribute in node.attribute:
        if attribute.name == name:
            return onnx.helper.get_attribute_value(attribute)
    return default


def _label(node: onnx.NodeProto) -> str:
    return f"{node.op_type} {node.name!r}"


def _rank(flow: Dataflow, name: str) -> int:
    shape = flow.shape(name)
    return len(shape) if shape is not None else -1


def _ints(flow: Dataflow, node: onnx.NodeProto, attribute: str, slot: int) -> list[int] | None:
    """Axes given as an attribute (old opsets) or as a constant input (new ones); None if run-time."""
    if len(node.input) > slot and node.input[slot]:
        value = flow.constant_value(node.input[slot])
        return None if value is None else [int(v) for v in np.ravel(value)]
    return list(_attr(node, attribute, []))


def _broadcast(node: onnx.NodeProto, axes: list[Axis], flow: Dataflow) -> Step | str:
    """Numpy broadcasting: the split axis aligns from the right. An unsplit operand must not vary along
    it, unless it is a constant (a RoPE table, a positional embedding): each slice then reads its rows."""
    names = list(node.input)
    out_rank = max(_rank(flow, n) for n in names if n)
    aligned = {a + out_rank - _rank(flow, n) for n, a in zip(names, axes) if n and a is not None}
    if len(aligned) != 1:
        return f"{_label(node)} combines operands split along different axes"
    axis = aligned.pop()
    sliced = []
    for slot, (name, own) in enumerate(zip(names, axes)):
        if not name or own is not None:
            continue
        shape = flow.shape(name) or ()
        position = axis - (out_rank - len(shape))
        if position < 0 or shape[position] == 1:
            continue
        if flow.constant_value(name) is None:
            return (f"{_label(node)} reads {name!r}, which is whole along the split axis (size {shape[position]}) "
                    "and not a constant initializer")
        sliced.append((slot, position))
    return Step((axis,) * len(node.output), sliced_constants=tuple(sliced))


def _matmul(node: onnx.NodeProto, axes: list[Axis], flow: Dataflow) -> Step | str:
    a_rank, b_rank = _rank(flow, node.input[0]), _rank(flow, node.input[1])
    out_rank = _rank(flow, node.output[0])
    if a_rank < 2 or b_rank < 2:
        return f"{_label(node)} has a vector operand (rank 1): not split"
    out: set[int] = set()
    for side, (axis, rank) in enumerate(zip(axes, (a_rank, b_rank))):
        if axis is None:
            continue
        contracted = rank - 1 if side == 0 else rank - 2
        if axis == contracted:
            return f"{_label(node)} contracts the split axis (every output row sums over all slices)"
        kept = rank - 2 if side == 0 else rank - 1  # A's rows (M) or B's columns (N)
        out.add(out_rank - 2 + side if axis == kept else axis + out_rank - rank)
    if len(out) != 1:
        return f"{_label(node)} multiplies two split operands along different axes (attention across the split axis)"
    axis = out.pop()
    if axis < out_rank - 2:  # a batch axis: an unsplit operand must broadcast along it
        for name, own in zip(node.input[:2], axes):
            shape = flow.shape(name) or ()
            position = axis - (out_rank - len(shape))
            if own is None and position >= 0 and shape[position] != 1:
                return f"{_label(node)} reads {name!r}, which is whole along the split batch axis"
    return Step((axis,))


def _gemm(node: onnx.NodeProto, axes: list[Axis], flow: Dataflow) -> Step | str:
    rows = 1 if _attr(node, "transA", 0) else 0
    cols = 0 if _attr(node, "transB", 0) else 1
    a, b = axes[0], axes[1]
    if a is not None and b is not None:
        return f"{_label(node)} multiplies two split operands (attention across the split axis)"
    if (a is not None and a != rows) or (b is not None and b != cols):
        return f"{_label(node)} contracts the split axis (every output row sums over all slices)"
    axis = 0 if a is not None else 1
    if len(axes) > 2 and node.input[2]:
        c_axis = axes[2]
        shape = flow.shape(node.input[2]) or ()
        position = axis - (2 - len(shape))
        if c_axis is None and position >= 0 and shape[position] != 1:
            return f"{_label(node)} adds {node.input[2]!r}, which is whole along the split axis"
        if c_axis is not None and c_axis + 2 - len(shape) != axis:
            return f"{_label(node)} adds a bias split along another axis"
    return Step((axis,))


def _view(node: onnx.NodeProto, axis: int, flow: Dataflow) -> Step | str:
    """Slicing then viewing equals viewing then slicing when the split axis survives as one whole axis
    with the same elements before it."""
    in_shape, out_shape = flow.shape(node.input[0]), flow.shape(node.output[0])
    before, size = math.prod(in_shape[:axis]), in_shape[axis]
    for position in range(len(out_shape)):
        if math.prod(out_shape[:position]) == before and out_shape[position] == size:
            break
    else:
        return f"{_label(node)} folds the split axis away ({list(in_shape)} -> {list(out_shape)})"
    if node.op_type != "Reshape":
        return Step((position,))
    shape = flow.constant_value(node.input[1])
    if shape is None:
        return f"{_label(node)} takes its shape at run time: the slice size cannot be written into it"
    literals = [int(v) for v in np.ravel(shape)]
    copies = not _attr(node, "allowzero", 0)  # 0 copies the input's length at that index
    if copies and position != axis and axis < len(literals) and literals[axis] == 0:
        return f"{_label(node)} copies the split axis's length into another axis (a 0 in its shape)"
    keeps_itself = literals[position] == -1 or (literals[position] == 0 and copies and position == axis)
    return Step((position,), None if keeps_itself else (1, position))


def _over_axis(node: onnx.NodeProto, axis: int, rank: int, covered: list[int], keepdims: bool = True) -> Step | str:
    covered = sorted(a % rank for a in covered)
    if axis in covered:
        return f"{_label(node)} computes over the split axis (it couples every slice)"
    shift = 0 if keepdims else sum(a < axis for a in covered)
    return Step((axis - shift,) * len(node.output))


def propagate(node: onnx.NodeProto, axes: list[Axis], flow: Dataflow) -> Step | str:
    """The split axis of each output of ``node`` given its inputs', or a reason it couples the slices."""
    op = node.op_type
    first = axes[0] if axes else None
    rank = _rank(flow, node.input[0]) if node.input and node.input[0] else -1
    if node.domain not in ("", "ai.onnx"):
        return f"{_label(node)} in domain {node.domain!r} is not known to keep rows independent"
    if op in _BROADCAST:
        return _broadcast(node, axes, flow)
    if op == "MatMul":
        return _matmul(node, axes, flow)
    if op == "Gemm":
        return _gemm(node, axes, flow)
    if op == "Gather":
        return _gather(node, axes, flow)
    if op == "Concat":
        return _concat(node, axes, flow)
    # every other op: the split tensor is the data input, parameters stay whole
    if first is None or any(a is not None for a in axes[1:]):
        return f"{_label(node)} reads a split tensor as a parameter (shape, axes, scale ...)"
    if op in _ROWWISE:
        return Step((first,) * len(node.output))
    if op in ("QuantizeLinear", "DequantizeLinear"):
        scale = flow.shape(node.input[1]) or ()
        if math.prod(scale) > 1 and _attr(node, "axis", 1) % rank == first:
            return f"{_label(node)} quantizes per channel along the split axis"
        return Step((first,))
    if op in _NORMALIZE_LAST:
        start = _attr(node, "axis", _NORMALIZE_LAST[op]) % rank
        covered = list(range(start, rank)) if op in ("LayerNormalization", "RMSNormalization") else [start]
        return _over_axis(node, first, rank, covered)
    if op in _REDUCE:
        covered = _ints(flow, node, "axes", 1)
        if covered is None:
            return f"{_label(node)} takes its axes at run time"
        if not covered and not _attr(node, "noop_with_empty_axes", 0):
            covered = list(range(rank))
        return _over_axis(node, first, rank, covered, bool(_attr(node, "keepdims", 1)))
    if op in ("ArgMax", "ArgMin"):
        return _over_axis(node, first, rank, [_attr(node, "axis", 0)], bool(_attr(node, "keepdims", 1)))
    if op in ("TopK", "CumSum", "LpNormalization"):
        default = -1
        if op == "CumSum":
            value = flow.constant_value(node.input[1])
            if value is None:
                return f"{_label(node)} takes its axis at run time"
            default = int(np.ravel(value)[0])
        return _over_axis(node, first, rank, [_attr(node, "axis", default)])
    if op == "MeanVarianceNormalization":
        return _over_axis(node, first, rank, list(_attr(node, "axes", [0, 2, 3])))
    if op == "BatchNormalization":
        if _attr(node, "training_mode", 0) or len([o for o in node.output if o]) > 1:
            return f"{_label(node)} is in training form: it computes statistics over the batch"
        if first == 1:
            return f"{_label(node)} scales per channel and the split axis is the channel axis"
        return Step((first,))
    if op in _BATCH_ONLY:
        if first != 0:
            return f"{_label(node)} slides or normalizes over axis {first} (neighbouring rows couple)"
        return Step((0,) * len(node.output))
    if op == "LRN":
        return Step((first,)) if first != 1 else f"{_label(node)} normalizes across channels, the split axis"
    if op == "Transpose":
        perm = list(_attr(node, "perm", list(reversed(range(rank)))))
        return Step((perm.index(first),))
    if op in _VIEWS:
        return _view(node, first, flow)
    if op == "Expand":
        return _expand(node, first, flow)
    if op == "Split":
        if _attr(node, "axis", 0) % rank == first:
            return f"{_label(node)} splits along the split axis"
        return Step((first,) * len(node.output))
    if op == "Slice":
        return _slice(node, first, flow)
    if op in ("Pad", "Tile"):
        amounts = flow.constant_value(node.input[1]) if len(node.input) > 1 else None
        if amounts is None or (op == "Pad" and len(node.input) > 3 and node.input[3]):
            return f"{_label(node)} takes its amounts at run time or per listed axis"
        amounts = [int(v) for v in np.ravel(amounts)]
        touched = (amounts[first], amounts[first + rank]) != (0, 0) if op == "Pad" else amounts[first] != 1
        return f"{_label(node)} changes the size of the split axis" if touched else Step((first,))
    if op == "Trilu":
        return Step((first,)) if first < rank - 2 else f"{_label(node)} masks by row and column of the split axis"
    if op in ("Shape", "Size"):
        return f"{_label(node)} reads the shape of a split tensor (shape arithmetic would see the slice)"
    return f"{_label(node)}: {op} is not known to keep rows of the split axis independent"


def _slice(node: onnx.NodeProto, axis: int, flow: Dataflow) -> Step | str:
    values = [flow.constant_value(name) if name else None for name in node.input[1:5]]
    if values[0] is None or values[1] is None or (len(node.input) > 3 and node.input[3] and values[2] is None):
        return f"{_label(node)} takes its bounds at run time"
    rank = _rank(flow, node.input[0])
    starts = np.ravel(values[0])
    sliced = [int(a) % rank for a in np.ravel(values[2])] if len(values) > 2 and values[2] is not None else list(range(len(starts)))
    if axis in sliced:
        return f"{_label(node)} slices along the split axis"
    return Step((axis,))


def _gather(node: onnx.NodeProto, axes: list[Axis], flow: Dataflow) -> Step | str:
    data_axis, index_axis = axes[0], axes[1] if len(axes) > 1 else None
    rank = _rank(flow, node.input[0])
    gather = _attr(node, "axis", 0) % rank
    if data_axis is not None and index_axis is not None:
        return f"{_label(node)} gathers split rows with split indices"
    if index_axis is not None:
        return Step((gather + index_axis,))  # an embedding lookup: one output row per index
    if data_axis == gather:
        return f"{_label(node)} gathers along the split axis"
    index_rank = _rank(flow, node.input[1])
    return Step((data_axis if data_axis < gather else data_axis + index_rank - 1,))


def _concat(node: onnx.NodeProto, axes: list[Axis], flow: Dataflow) -> Step | str:
    split = {a for a in axes if a is not None}
    whole = [name for name, a in zip(node.input, axes) if name and a is None]
    if len(split) != 1 or whole:
        return f"{_label(node)} joins a split tensor with {whole[0] if whole else 'one split along another axis'!r}"
    axis = split.pop()
    if _attr(node, "axis", 0) % _rank(flow, node.input[0]) == axis:
        return f"{_label(node)} concatenates along the split axis"
    return Step((axis,))


def _expand(node: onnx.NodeProto, axis: int, flow: Dataflow) -> Step | str:
    """Broadcast to a constant shape: the split axis keeps its rows; a literal length there becomes the slice's."""
    shape = flow.constant_value(node.input[1])
    if shape is None:
        return f"{_label(node)} takes its shape at run time"
    shape = [int(v) for v in np.ravel(shape)]
    out_rank = _rank(flow, node.output[0])
    aligned = axis + out_rank - _rank(flow, node.input[0])
    position = aligned - (out_rank - len(shape))
    if position < 0 or shape[position] == 1:
        return Step((aligned,))
    return Step((aligned,), (1, position))

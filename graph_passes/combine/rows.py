"""Which ops compute each row of a row axis from that row alone, and where that axis goes.

An op is row-wise on axis ``a`` of its activation inputs when slicing every activation along ``a`` and
running the op on each slice gives the slices of its output along the output's row axis. Then the op on
the concatenated rows of several requests, split back, computes each request's own result:

    x_p [1,128,H] ─┐                                   ┌─> y_p [1,128,N]
                   ├─ Concat(axis 1) ─> MatMul(W) ─ Split
    x_d [1,  1,H] ─┘         [1,129,H]     [1,129,N]   └─> y_d [1,  1,N]

``output_axes(node, in_axes, ...)`` answers for one node: the row axis of each output, given the row
axis of each activation input (None for constant inputs), or a reason why the op is not row-wise there.
Axes are non-negative, in each tensor's own rank.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import helper

Shape = tuple[int, ...]
Axes = list[int]

ELEMENTWISE = frozenset({
    "Abs", "Acos", "Acosh", "Add", "And", "Asin", "Asinh", "Atan", "Atanh", "BitShift", "Cast", "CastLike", "Ceil",
    "Celu", "Clip", "Cos", "Cosh", "Div", "Elu", "Equal", "Erf", "Exp", "Floor", "Gelu", "Greater", "GreaterOrEqual",
    "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu", "Less", "LessOrEqual", "Log", "Max", "Mean",
    "Min", "Mish", "Mod", "Mul", "Neg", "Not", "Or", "Pow", "PRelu", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid",
    "Sign", "Sin", "Sinh", "Softplus", "Softsign", "Sqrt", "Sub", "Sum", "Tan", "Tanh", "ThresholdedRelu", "Where",
    "Xor", "QuantizeLinear", "DequantizeLinear",
})
BATCH_ONLY = frozenset({  # per sample of axis 0: images of several requests as one batch
    "Conv", "ConvTranspose", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
    "BatchNormalization", "InstanceNormalization", "LRN", "QLinearConv",
})
REDUCE = frozenset({"ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
                    "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp"})
NORMALIZE = frozenset({"LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization"})
SOFTMAX = frozenset({"Softmax", "LogSoftmax", "Hardmax"})

COUPLES_ROWS = "couples rows within a request"
_QDQ = ("QuantizeLinear", "DequantizeLinear")


def _attr(node: onnx.NodeProto, name: str, default=None):
    for attribute in node.attribute:
        if attribute.name == name:
            return helper.get_attribute_value(attribute)
    return default


class Context:
    """What a rule may ask about one node: ranks, constant inputs' shapes and values, the opset."""

    def __init__(self, node: onnx.NodeProto, in_shapes: Sequence[Shape | None], out_ranks: Sequence[int],
                 value: Callable[[str], np.ndarray | None], opset: int) -> None:
        self.node, self.in_shapes, self.out_ranks, self._value, self.opset = node, in_shapes, out_ranks, value, opset

    def rank(self, slot: int) -> int:
        shape = self.in_shapes[slot] if slot < len(self.in_shapes) else None
        return len(shape) if shape is not None else -1

    def value(self, slot: int) -> np.ndarray | None:
        inputs = self.node.input
        return self._value(inputs[slot]) if slot < len(inputs) and inputs[slot] else None


def _aligned(axis: int, rank: int, out_rank: int) -> int:
    return axis + out_rank - rank


def _broadcasts_over(ctx: Context, slot: int, out_axis: int, out_rank: int) -> bool:
    """Constant input ``slot`` is 1 (or absent) on the output's row axis, so every row sees all of it."""
    shape = ctx.in_shapes[slot]
    if shape is None:
        return False
    position = out_axis - (out_rank - len(shape))
    return position < 0 or shape[position] == 1


def _elementwise(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    out_rank = ctx.out_ranks[0]
    found = {_aligned(a, ctx.rank(s), out_rank) for s, a in enumerate(in_axes) if a is not None}
    if len(found) != 1:
        return "its inputs' row axes disagree"
    (axis,) = found
    for slot, a in enumerate(in_axes):
        if a is not None or slot >= len(ctx.node.input) or not ctx.node.input[slot]:
            continue
        shape = ctx.in_shapes[slot]
        if ctx.node.op_type in _QDQ and slot > 0 and shape is not None and int(np.prod(shape)) > 1:
            if _attr(ctx.node, "axis", 1) % out_rank == axis:  # per-axis encodings: one per channel of ``axis``
                return "it quantizes per channel of the row axis"
            continue
        if not _broadcasts_over(ctx, slot, axis, out_rank):
            return f"its constant input {ctx.node.input[slot]!r} varies along the row axis"
    return [axis] * len(ctx.out_ranks)


def _matmul(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    if in_axes[0] is not None and in_axes[1] is not None:
        return f"{COUPLES_ROWS}: MatMul of two activations (attention scores or their weighted sum)"
    if in_axes[0] is None:
        return "the activation is its right operand: rows of the weight, not of the requests"
    axis, rank = in_axes[0], ctx.rank(0)
    if rank < 2 or axis == rank - 1:
        return "the row axis is the reduced (inner) axis"
    weight = ctx.in_shapes[1]
    if weight is None or any(d != 1 for d in weight[:-2]):
        return "its weight is batched per row"
    return [_aligned(axis, rank, ctx.out_ranks[0])]


def _gemm(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    if in_axes[0] is None or any(a is not None for a in in_axes[1:]) or _attr(ctx.node, "transA", 0):
        return "rows are not the first axis of its one activation input"
    if in_axes[0] != 0:
        return "Gemm's rows are axis 0"
    if len(ctx.node.input) > 2 and ctx.node.input[2] and not _broadcasts_over(ctx, 2, 0, 2):
        return "its bias varies along the rows"
    return [0]


def _batch_only(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    if in_axes[0] != 0 or any(a is not None for a in in_axes[1:]):
        return f"{ctx.node.op_type} is per sample of axis 0 only"
    return [0] * len(ctx.out_ranks)


def _reduced_axes(ctx: Context, rank: int) -> list[int] | None:
    axes = _attr(ctx.node, "axes")
    if axes is None and len(ctx.node.input) > 1 and ctx.node.input[1]:
        value = ctx.value(1)
        if value is None:
            return None
        axes = value.reshape(-1).tolist()
    if axes is None or len(axes) == 0:
        return None if _attr(ctx.node, "noop_with_empty_axes", 0) else list(range(rank))
    return sorted(int(a) % rank for a in axes)


def _reduce(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    axis, rank = in_axes[0], ctx.rank(0)
    if axis is None:
        return "its data input is a constant"
    axes = _reduced_axes(ctx, rank)
    if axes is None:
        return "its reduced axes are not known"
    if axis in axes:
        return f"{COUPLES_ROWS}: it reduces over the row axis"
    return [axis if _attr(ctx.node, "keepdims", 1) else axis - sum(1 for a in axes if a < axis)]


def _normalize(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    axis, rank = in_axes[0], ctx.rank(0)
    if axis is None or any(a is not None for a in in_axes[1:]):
        return "its scale or bias is an activation"
    if axis >= _attr(ctx.node, "axis", -1) % rank:
        return f"{COUPLES_ROWS}: it normalizes over the row axis"
    return [axis] * len(ctx.out_ranks)


def _softmax(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    axis, rank = in_axes[0], ctx.rank(0)
    over = _attr(ctx.node, "axis", -1 if ctx.opset >= 13 else 1) % rank
    if axis == over or (ctx.opset < 13 and axis >= over):
        return f"{COUPLES_ROWS}: Softmax over the row axis"
    return [axis]


def _gather(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    at = _attr(ctx.node, "axis", 0) % max(ctx.rank(0), 1)
    if in_axes[0] is None and in_axes[1] is not None:  # an embedding: rows of indices pick rows of the table
        return [in_axes[1] + at]
    if in_axes[0] is not None and in_axes[1] is None and in_axes[0] != at:
        axis = in_axes[0]
        return [axis if axis < at else axis + max(ctx.rank(1), 0) - 1]
    return "it gathers along the row axis"


def _constant_ints(ctx: Context, slot: int) -> list[int] | None:
    value = ctx.value(slot)
    return None if value is None else [int(v) for v in value.reshape(-1)]


def _slice(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    axis, rank = in_axes[0], ctx.rank(0)
    if axis is None or any(a is not None for a in in_axes[1:]):
        return "its bounds are activations"
    starts = _constant_ints(ctx, 1)
    axes = _constant_ints(ctx, 3) if len(ctx.node.input) > 3 and ctx.node.input[3] else \
        (list(range(len(starts))) if starts is not None else None)
    if axes is None:
        return "its axes are not known"
    if axis in [a % rank for a in axes]:
        return "it slices the row axis"
    return [axis]


def _concat(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    if any(a is None for a in in_axes):
        return "it joins an activation with a constant"
    if len(set(in_axes)) != 1:
        return "its inputs' row axes disagree"
    if _attr(ctx.node, "axis") % ctx.rank(0) == in_axes[0]:
        return "it concatenates along the row axis (a KV cache)"
    return [in_axes[0]]


def _split(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    if in_axes[0] is None or any(a is not None for a in in_axes[1:]):
        return "its sizes are activations"
    if _attr(ctx.node, "axis", 0) % ctx.rank(0) == in_axes[0]:
        return "it splits the row axis"
    return [in_axes[0]] * len(ctx.out_ranks)


def _transpose(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    rank = ctx.rank(0)
    perm = list(_attr(ctx.node, "perm", list(range(rank))[::-1]))
    return [perm.index(in_axes[0])]


def _unsqueeze(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    axes = _attr(ctx.node, "axes") or _constant_ints(ctx, 1)
    if axes is None:
        return "its axes are not known"
    out_rank = ctx.out_ranks[0]
    kept = [i for i in range(out_rank) if i not in {a % out_rank for a in axes}]
    return [kept[in_axes[0]]]


def _squeeze(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    rank, shape = ctx.rank(0), ctx.in_shapes[0]
    axes = _attr(ctx.node, "axes") or _constant_ints(ctx, 1)
    axes = [a % rank for a in axes] if axes is not None else [i for i, d in enumerate(shape or ()) if d == 1]
    if in_axes[0] in axes:
        return "it squeezes the row axis"
    return [in_axes[0] - sum(1 for a in axes if a < in_axes[0])]


RULES: dict[str, Callable[[Context, Sequence[int | None]], Axes | str]] = {
    **{op: _elementwise for op in ELEMENTWISE}, **{op: _batch_only for op in BATCH_ONLY},
    **{op: _reduce for op in REDUCE}, **{op: _normalize for op in NORMALIZE}, **{op: _softmax for op in SOFTMAX},
    "MatMul": _matmul, "Gemm": _gemm, "Gather": _gather, "Slice": _slice, "Concat": _concat, "Split": _split,
    "Transpose": _transpose, "Unsqueeze": _unsqueeze, "Squeeze": _squeeze,
}
RESHAPES = frozenset({"Reshape", "Expand", "Flatten", "Tile", "Pad", "Resize", "DepthToSpace", "SpaceToDepth"})


def output_axes(ctx: Context, in_axes: Sequence[int | None]) -> Axes | str:
    """The row axis of each output, or why the op is not row-wise on these axes."""
    node = ctx.node
    if node.domain not in ("", "ai.onnx"):
        return f"op {node.domain}::{node.op_type} is not known to be row-wise"
    rule = RULES.get(node.op_type)
    if rule is None:
        if node.op_type in RESHAPES:
            return "it reshapes by the request's own sizes"
        return f"{node.op_type} is not known to be row-wise"
    if all(a is None for a in in_axes):
        return "it reads no activation"
    return rule(ctx, in_axes)


def preferred_axes(rank: int) -> list[int]:
    """Row axes to try for an activation whose requests all have the same shape: the token axis of
    a [batch, tokens, features] tensor first (rank - 2), then the others from the left."""
    first = [rank - 2] if rank >= 2 else []
    return first + [a for a in range(rank) if a not in first]

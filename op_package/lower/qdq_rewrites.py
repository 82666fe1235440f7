"""What each quantized unit becomes (qdq_fusion.py finds the units and splices the result in).

    kind     op types                               kernel node              generation-time constants
    unary    qlut.UNARY: Sigmoid, Tanh, Sqrt, ...   HexfuseQLookup           256-entry table (qlut.py)
    binary   Add, Sub, Mul                          HexfuseQBinary           multipliers, shift (qfixed.py)
    mean     ReduceMean over trailing axes          HexfuseQRowMean          multiplier, shift (qfixed.py)
    softmax  Softmax over the last axis             HexfuseQSoftmax          float exp table
    pool     MaxPool, GlobalMaxPool                  HexfuseQMaxPool          window geometry, table if the
                                                                             encodings differ
             GlobalAveragePool                      HexfuseQRowMean          (a mean over each H x W plane)
    move     Reshape, Transpose, Slice, Concat ...  the op itself on codes   a HexfuseQLookup requantizes
                                                                             where encodings differ

A builder returns the new nodes and any new intermediate tensors, or the reason it cannot: a reason names
what is missing (e.g. a value known only at run time), never just "unsupported".
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import NodeSpec, QuantSpec, TensorSpec
from hexfuse.op_package.lower import qfixed
from hexfuse.op_package.lower.context import NodeContext, numel
from hexfuse.op_package.lower.qlut import QTYPES, UNARY, lookup_table, requantize_table
from hexfuse.op_package.lower.qvector_ops import (BINARY_OPS, QBINARY, QLOOKUP, QMAXPOOL, QROWMEAN, QSOFTMAX,
                                                  maxpool_geometry)

ROW_OPS = ("ReduceMean", "Softmax", "MaxPool", "GlobalMaxPool", "GlobalAveragePool")
MOVES = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Expand", "Slice", "Concat", "Split", "Gather",
         "Tile", "DepthToSpace", "SpaceToDepth")
Built = tuple[list[NodeSpec], list[TensorSpec]]


class NameSource:
    """Fresh tensor names for requantized intermediates, unique among the fused op's tensors."""

    def __init__(self, tensors: dict[str, TensorSpec], added: list[TensorSpec]):
        self._taken = set(tensors) | {t.name for t in added}

    def fresh(self, base: str) -> str:
        name, k = f"{base}/hexfuse_q", 0
        while name in self._taken:
            k += 1
            name = f"{base}/hexfuse_q{k}"
        self._taken.add(name)
        return name


def data_inputs(node: NodeSpec) -> tuple[int, ...] | None:
    """Inputs that must be dequantized for the node to run on codes (None: no quantized kernel)."""
    if node.op_type in UNARY or node.op_type in MOVES or node.op_type in ROW_OPS:
        return tuple(i for i, n in enumerate(node.inputs) if n) if node.op_type == "Concat" else (0,)
    if node.op_type in BINARY_OPS:
        return (0, 1)
    return None


def _enc(q: QuantSpec) -> tuple[str, float, int]:
    return q.dtype, q.scale[0], q.zero_point[0]


def _eight_bit(*quants: QuantSpec) -> str | None:
    wide = sorted({q.dtype for q in quants} - set(QTYPES))
    return f"{wide[0]} codes have no 8-bit kernel (a table would need 65536 entries)" if wide else None


def _same_type(*quants: QuantSpec) -> str | None:
    types = sorted({q.dtype for q in quants})
    return None if len(types) == 1 else f"mixed code types {types}"


def _unary(node: NodeSpec, dqs, qs, ins, outs, tensors, names) -> Built | str:
    if node.op_type == "Clip" and any(node.inputs[1:3]):
        return "Clip bounds given as inputs are known only at run time"
    if node.op_type == "Dropout" and len(node.inputs) > 2 and node.inputs[2]:
        return "Dropout's training_mode input is known only at run time"
    why = _eight_bit(ins[0], outs[0])
    if why:
        return why
    table = lookup_table(node.op_type, node.attributes, ins[0], outs[0])
    if isinstance(table, str):
        return table
    return [NodeSpec(node.name, QLOOKUP, "", (dqs[0].inputs[0],), (qs[0].outputs[0],),
                     {"lut": tuple(int(v) for v in table), "source": node.op_type})], []


def _binary(node: NodeSpec, dqs, qs, ins, outs, tensors, names) -> Built | str:
    a, b, out = ins[0], ins[1], outs[0]
    why = _eight_bit(a, b, out) or _same_type(a, b, out)
    if why:
        return why
    fixed = (qfixed.mul(a.scale[0], b.scale[0], out.scale[0]) if node.op_type == "Mul"
             else qfixed.add_sub(node.op_type, a.scale[0], b.scale[0], out.scale[0]))
    if isinstance(fixed, str):
        return fixed
    return [NodeSpec(node.name, QBINARY, "", (dqs[0].inputs[0], dqs[1].inputs[0]), (qs[0].outputs[0],),
                     {"op": node.op_type, "a_mult": fixed.a_mult, "b_mult": fixed.b_mult, "shift": fixed.shift,
                      "a_zero": a.zero_point[0], "b_zero": b.zero_point[0], "out_zero": out.zero_point[0]})], []


def _reduced_axes(node: NodeSpec, x: TensorSpec, y: TensorSpec) -> list[int] | str:
    if int(node.attributes.get("keepdims", 1)):  # type: ignore[call-overload]
        if len(x.shape) != len(y.shape) or any(o not in (1, i) for i, o in zip(x.shape, y.shape)):
            return f"output shape {list(y.shape)} is not a keepdims reduction of {list(x.shape)}"
        return [d for d, (i, o) in enumerate(zip(x.shape, y.shape)) if i != o]  # size-1 axes do not matter
    if "axes" not in node.attributes:
        return "keepdims=0 with axes given as an input: the reduced axes are known only at run time"
    return sorted({int(a) % max(1, len(x.shape)) for a in node.attributes["axes"]})  # type: ignore[union-attr]


def _row_split(shape: tuple[int, ...], axes: list[int]) -> tuple[int, int] | str:
    """(rows, length) when the reduced axes (and size-1 axes) are exactly a trailing block."""
    first = min(axes) if axes else len(shape)
    if any(d not in axes and shape[d] != 1 for d in range(first, len(shape))):
        return f"reduced axes {axes} of shape {list(shape)} are not the trailing ones"
    return numel(shape[:first]), numel(shape[first:])


def _row_mean(node: NodeSpec, dqs, qs, ins, outs, length: int) -> Built | str:
    fixed = qfixed.mean(ins[0].scale[0], length, outs[0].scale[0])
    if isinstance(fixed, str):
        return fixed
    return [NodeSpec(node.name, QROWMEAN, "", (dqs[0].inputs[0],), (qs[0].outputs[0],),
                     {"len": length, "mult": fixed[0], "shift": fixed[1], "in_zero": ins[0].zero_point[0],
                      "out_zero": outs[0].zero_point[0]})], []


def _mean(node: NodeSpec, dqs, qs, ins, outs, tensors, names) -> Built | str:
    x, y = tensors[node.inputs[0]], tensors[node.outputs[0]]
    why = _eight_bit(ins[0], outs[0]) or _same_type(ins[0], outs[0])
    if why:
        return why
    axes = _reduced_axes(node, x, y)
    split = axes if isinstance(axes, str) else _row_split(x.shape, axes)
    return split if isinstance(split, str) else _row_mean(node, dqs, qs, ins, outs, split[1])


def _global_mean(node: NodeSpec, dqs, qs, ins, outs, tensors, names) -> Built | str:
    """GlobalAveragePool on NC... is a mean over each plane: rows of H x W (x D) codes."""
    x = tensors[node.inputs[0]]
    why = _eight_bit(ins[0], outs[0]) or _same_type(ins[0], outs[0])
    if why or len(x.shape) < 3:
        return why or f"GlobalAveragePool of rank {len(x.shape)}"
    return _row_mean(node, dqs, qs, ins, outs, numel(x.shape[2:]))


def _maxpool(node: NodeSpec, dqs, qs, ins, outs, tensors, names) -> Built | str:
    why = _eight_bit(ins[0], outs[0])
    if why:
        return why
    attrs = {**node.attributes, "global": int(node.op_type == "GlobalMaxPool")}
    if _enc(ins[0]) != _enc(outs[0]):
        attrs["lut"] = tuple(int(v) for v in requantize_table(ins[0], outs[0]))
    kernel_node = NodeSpec(node.name, QMAXPOOL, "", (dqs[0].inputs[0],), (qs[0].outputs[0],), attrs)
    try:
        maxpool_geometry(NodeContext(kernel_node, tensors, {}))
    except HexfuseError as error:
        return str(error)
    return [kernel_node], []


def _softmax(node: NodeSpec, dqs, qs, ins, outs, tensors, names) -> Built | str:
    x = tensors[node.inputs[0]]
    why = _eight_bit(ins[0], outs[0])
    if why:
        return why
    rank = max(1, len(x.shape))
    axis = int(node.attributes.get("axis", -1)) % rank  # type: ignore[call-overload]
    split = _row_split(x.shape or (1,), [axis])
    if isinstance(split, str):
        return f"Softmax {split}"
    # exp(x_i - max) = exp(-scale * (max_code - code)): 256 values, float64 rounded once to float32
    table = np.exp(-np.float64(np.float32(ins[0].scale[0])) * np.arange(256)).astype(np.float32)
    return [NodeSpec(node.name, QSOFTMAX, "", (dqs[0].inputs[0],), (qs[0].outputs[0],),
                     {"len": split[1], "exp_table": tuple(float(v) for v in table),
                      "out_scale": outs[0].scale[0], "out_zero": outs[0].zero_point[0]})], []


def _lookup(name: str, src: str, dst: str, table: np.ndarray) -> NodeSpec:
    return NodeSpec(name, QLOOKUP, "", (src,), (dst,), {"lut": tuple(int(v) for v in table), "source": "requantize"})


def _temp(names: NameSource, like: str, shape: tuple[int, ...], quant: QuantSpec) -> TensorSpec:
    return TensorSpec(names.fresh(like), quant.dtype, shape, quant=quant)


def _move(node: NodeSpec, dqs, qs, ins, outs, tensors, names) -> Built | str:
    """The op itself on the codes; a table requantizes where an input or output encoding differs."""
    data = sorted(dqs)
    inputs = list(node.inputs)
    for i in data:
        inputs[i] = dqs[i].inputs[0]
    outputs = [q.outputs[0] for q in qs]
    if len({_enc(q) for q in (*ins.values(), *outs)}) == 1:
        return [NodeSpec(node.name, node.op_type, "", tuple(inputs), tuple(outputs), dict(node.attributes))], []
    why = _eight_bit(*ins.values(), *outs)
    if why:
        return f"encodings differ and {why}"
    pre: list[NodeSpec] = []
    post: list[NodeSpec] = []
    temps: list[TensorSpec] = []
    shrinks = len(data) == 1 and len(outs) == 1 and numel(tensors[node.outputs[0]].shape) < numel(tensors[node.inputs[0]].shape)
    if len(outs) == 1 and not shrinks:  # requantize every input to the output's encoding, then move
        for i in data:
            if _enc(ins[i]) != _enc(outs[0]):
                t = _temp(names, inputs[i], tensors[node.inputs[i]].shape, outs[0])
                pre.append(_lookup(f"{node.name}/requantize{i}", inputs[i], t.name, requantize_table(ins[i], outs[0])))
                inputs[i], temps = t.name, [*temps, t]
    elif len(data) == 1:  # move in the input's encoding, then requantize each output
        for k, name in enumerate(node.outputs):
            if _enc(outs[k]) != _enc(ins[data[0]]):
                t = _temp(names, outputs[k], tensors[name].shape, ins[data[0]])
                post.append(_lookup(f"{node.name}/requantize_out{k}", t.name, outputs[k],
                                    requantize_table(ins[data[0]], outs[k])))
                outputs[k], temps = t.name, [*temps, t]
    else:
        return "several inputs and several outputs with different encodings"
    moved = NodeSpec(node.name, node.op_type, "", tuple(inputs), tuple(outputs), dict(node.attributes))
    return [*pre, moved, *post], temps


BUILDERS: dict[str, Callable[..., Built | str]] = {
    **{t: _unary for t in UNARY}, **{t: _binary for t in BINARY_OPS}, **{t: _move for t in MOVES},
    "ReduceMean": _mean, "Softmax": _softmax, "MaxPool": _maxpool, "GlobalMaxPool": _maxpool,
    "GlobalAveragePool": _global_mean,
}


def rewrite(unit, ins: dict[int, QuantSpec], outs: list[QuantSpec], tensors: dict[str, TensorSpec],
            names: NameSource) -> Built | str:
    """The kernel nodes replacing ``unit`` (a qdq_fusion.Unit), or why it stays on the float kernels."""
    return BUILDERS[unit.op.op_type](unit.op, unit.dqs, unit.qs, ins, outs, tensors, names)

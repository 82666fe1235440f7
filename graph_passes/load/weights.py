"""onnx's C++ passes run on a model without its weights' data, where the weights are most of its bytes.

Shape inference and the function inliner read a weight's type and dims, never its values (a shape
function reads the values of small integer tensors alone: Reshape's shape, Slice's starts). Yet their
C++ side parses, works over and serializes back every byte it is given: on a 60 MB decoder layer,
shape inference takes 86 ms with the weights and 1.4 ms without. ``lighten`` hands such a pass the
model with the data of its large non-integer initializers left out, copied field by field so that
those bytes are never copied; ``LeftOut.give_back`` gives that data back by position, only where a
caller needs it (the pass reads the inferred model's types alone; a copy of a 100 MB layer's weights
costs about 45 ms). Given back, it is the same model byte for byte on every bundled, light and
real-size model here (tests/graph_passes/test_load.py); fields unknown to this onnx are not carried
(no pass of this onnx could read them)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import onnx
from google.protobuf.message import Message
from onnx import helper

_WEIGHT_MIN_ELEMENTS = 1024  # more than any tensor a shape function reads the values of (a shape, axes, pads)
MIN_BYTES = 1 << 23  # below, the pass over the whole model costs less than leaving its weights out
_SHAPE_DATA_TYPES = (onnx.TensorProto.INT32, onnx.TensorProto.INT64)  # what data propagation computes with


class LeftOut:
    """The data of ``source``'s initializers at ``positions``, left out of a model made from it, to give
    back once (the copies of one loaded model share it)."""

    def __init__(self, source: onnx.ModelProto, positions: tuple[int, ...]) -> None:
        self.source, self.positions = source, positions

    def give_back(self, light: onnx.ModelProto) -> onnx.ModelProto:
        """``light`` with that data (in place; a second call has nothing left to do)."""
        weights, restored = self.source.graph.initializer, light.graph.initializer
        for position in self.positions:
            restored[position].CopyFrom(weights[position])  # one copy of the bytes (reading raw_data is one more)
        self.positions = ()
        return light


def without_weights(model: onnx.ModelProto, size: int,
                    transform: Callable[[onnx.ModelProto], onnx.ModelProto]) -> onnx.ModelProto | None:
    """``transform`` of a model of ``size`` bytes, run without its weights' data and given it back; None
    as ``lighten`` says."""
    light = lighten(model, size, transform)
    return light[1].give_back(light[0]) if light is not None else None


def lighten(model: onnx.ModelProto, size: int, transform: Callable[[onnx.ModelProto], onnx.ModelProto]
            ) -> tuple[onnx.ModelProto, LeftOut] | None:
    """(``transform`` of a model of ``size`` bytes run without its weights' data, what was left out);
    None where the weights are not most of its bytes, or where ``transform`` fails that way or moves an
    initializer (the caller then runs it on the whole model, whose error is the one to word)."""
    heavy = _weights(model, size)
    if not heavy:
        return None
    try:
        result = transform(_light_copy(model, frozenset(heavy)))
    except Exception:  # InferenceError and C++ errors surface under several types
        return None
    weights, kept = model.graph.initializer, result.graph.initializer
    if len(kept) != len(weights) or any(kept[p].name != weights[p].name for p in heavy):
        return None
    return result, LeftOut(model, tuple(heavy))


def _light_copy(model: onnx.ModelProto, heavy: frozenset[int]) -> onnx.ModelProto:
    """``model`` with the initializers at ``heavy`` present but their data empty (a tensor keeps its
    value field)."""
    light = onnx.ModelProto()
    _copy_fields(model, light, skip="graph")
    _copy_fields(model.graph, light.graph, skip="initializer")
    copies = light.graph.initializer
    for position, tensor in enumerate(model.graph.initializer):
        copy = copies.add()
        if position in heavy:
            _copy_fields(tensor, copy, skip="raw_data")
            copy.raw_data = b""
        else:
            copy.CopyFrom(tensor)
    return light


def _copy_fields(source: Message, target: Message, skip: str) -> None:
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if isinstance(value, Message):
            getattr(target, field.name).CopyFrom(value)
        elif isinstance(value, (bytes, str, int, float)):  # (enums and bools are ints)
            setattr(target, field.name, value)
        else:  # a repeated field (its descriptor's way of saying so changed across protobuf releases)
            getattr(target, field.name).extend(value)


def _weights(model: onnx.ModelProto, size: int) -> list[int]:
    """Positions of the large non-integer initializers, where they are at least half of ``size`` bytes."""
    if size < MIN_BYTES:
        return []
    heavy, heavy_bytes = [], 0
    for position, tensor in enumerate(model.graph.initializer):
        if tensor.data_type in _SHAPE_DATA_TYPES or not tensor.HasField("raw_data"):
            continue
        elements = 1
        for dim in tensor.dims:
            elements *= dim
        if elements > _WEIGHT_MIN_ELEMENTS:
            heavy.append(position)
            heavy_bytes += elements * _itemsize(tensor.data_type)
    return heavy if 2 * heavy_bytes >= size else []


@cache
def _itemsize(data_type: int) -> int:
    try:
        return helper.tensor_dtype_to_np_dtype(data_type).itemsize
    except (KeyError, TypeError, ValueError):
        return 1

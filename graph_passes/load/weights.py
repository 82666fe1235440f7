"""onnx's C++ passes run on a model without its weights' data, where the weights are most of its bytes.

Shape inference and the function inliner read a weight's type and dims, never its values (a shape
function reads the values of small integer tensors alone: Reshape's shape, Slice's starts). Yet their
C++ side parses, works over and serializes back every byte it is given: on a 60 MB decoder layer,
shape inference takes 86 ms with the weights and 1.4 ms without. ``without_weights`` hands such a pass
the model with the data of its large non-integer initializers left empty, then gives that data back
by position (the same model byte for byte on every bundled, light and real-size model here;
tests/graph_passes/test_load.py)."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache

import onnx
from onnx import helper

_WEIGHT_MIN_ELEMENTS = 1024  # more than any tensor a shape function reads the values of (a shape, axes, pads)
MIN_BYTES = 1 << 23  # below, the pass over the whole model costs less than leaving its weights out
_SHAPE_DATA_TYPES = (onnx.TensorProto.INT32, onnx.TensorProto.INT64)  # what data propagation computes with


def without_weights(model: onnx.ModelProto, size: int,
                    transform: Callable[[onnx.ModelProto], onnx.ModelProto]) -> onnx.ModelProto | None:
    """``transform`` of a model of ``size`` bytes, run without its weights' data and given it back; None
    where the weights are not most of its bytes, or where ``transform`` fails that way or moves an
    initializer (the caller then runs it on the whole model, whose error is the one to word)."""
    heavy = _weights(model, size)
    if not heavy:
        return None
    light = onnx.ModelProto()
    light.CopyFrom(model)
    for position in heavy:
        light.graph.initializer[position].raw_data = b""  # present, so that the tensor keeps a value field
    try:
        result = transform(light)
    except Exception:  # InferenceError and C++ errors surface under several types
        return None
    weights, restored = model.graph.initializer, result.graph.initializer
    if len(restored) != len(weights) or any(restored[p].name != weights[p].name for p in heavy):
        return None
    for position in heavy:
        restored[position].CopyFrom(weights[position])
    return result


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

"""What a lowering rule sees (one node of a fused op) and what it returns (one kernel call).

A rule turns a ``NodeSpec`` into a ``Kernel``: the C++ kernel function, its params struct filled with
static values (shapes, strides, attributes, buffer indices) and the number of work units the kernel's
range covers. Rules refuse what they cannot compute exactly by raising ``HexfuseError`` through
``NodeContext.fail``, which names the node and its op.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import AttributeValue, NodeSpec, TensorSpec

MAX_RANK = 6
MAX_PARTS = 32
ELEMENT_SIZE = {"float32": 4, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "int32": 4, "int64": 8, "bool": 1}
CPP_DTYPE = {"float32": "kF32", "uint8": "kU8", "int8": "kI8", "uint16": "kU16", "int16": "kI16",
             "int32": "kI32", "int64": "kI64", "bool": "kBool"}
INT_DTYPES = ("uint8", "int8", "uint16", "int16", "int32", "int64")
INDEX_DTYPES = ("int32", "int64")


@dataclass(frozen=True)
class Kernel:
    fn: str  # C++ kernel function in namespace hexfuse
    params_type: str  # C++ params struct in namespace hexfuse
    fields: tuple[tuple[str, str], ...]  # (member, C++ literal), assigned in this order
    units: int  # the kernel's range is [0, units)
    unit_cost: float  # rough work per unit (flops or bytes): decides the tile count
    max_tiles: int = 64


def cpp(value: object) -> str:
    """A C++ literal for a Python value (lists become std::array braces)."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, (int, np.integer)):
        return f"{int(value)}" if -2**31 <= int(value) < 2**31 else f"{int(value)}LL"
    if isinstance(value, (float, np.floating)):
        f32 = float(np.float32(value))
        if math.isinf(f32):
            return "HUGE_VALF" if f32 > 0 else "-HUGE_VALF"
        if math.isnan(f32):
            raise HexfuseError("NaN constant in a kernel parameter")
        text = repr(f32)
        return text + "f" if ("." in text or "e" in text) else text + ".0f"
    if isinstance(value, (list, tuple)):
        if all(type(v) is int and -2**31 <= v < 2**31 for v in value):  # tables: one join, same text
            return "{{" + ", ".join(map(str, value)) + "}}"
        return "{{" + ", ".join(cpp(v) for v in value) + "}}"
    if isinstance(value, str):
        return value  # already C++ (enum names)
    raise HexfuseError(f"cannot express {value!r} as a C++ literal")


class NodeContext:
    """One node inside one fused op, with its tensors and buffer indices resolved."""

    def __init__(self, node: NodeSpec, tensors: dict[str, TensorSpec], buffers: dict[str, int]):
        self.node = node
        self._tensors = tensors
        self._buffers = buffers

    def fail(self, why: str) -> HexfuseError:
        return HexfuseError(f"node {self.node.name!r} ({self.node.op_type}): {why}")

    def attr(self, name: str, default: AttributeValue | None = None) -> AttributeValue | None:
        return self.node.attributes.get(name, default)

    def has_input(self, i: int) -> bool:
        return i < len(self.node.inputs) and self.node.inputs[i] != ""

    def has_output(self, i: int) -> bool:
        return i < len(self.node.outputs) and self.node.outputs[i] != ""

    def tensor(self, name: str) -> TensorSpec:
        try:
            return self._tensors[name]
        except KeyError:
            raise self.fail(f"tensor {name!r} is not described in the spec") from None

    def input(self, i: int) -> TensorSpec:
        if not self.has_input(i):
            raise self.fail(f"input {i} is missing")
        return self.tensor(self.node.inputs[i])

    def output(self, i: int) -> TensorSpec:
        if not self.has_output(i):
            raise self.fail(f"output {i} is missing")
        return self.tensor(self.node.outputs[i])

    def buf(self, name: str) -> int:
        return self._buffers[name]

    def in_buf(self, i: int) -> int:
        return self.buf(self.node.inputs[i]) if self.has_input(i) else -1

    def out_buf(self, i: int) -> int:
        return self.buf(self.node.outputs[i]) if self.has_output(i) else -1

    def require_dtype(self, tensor: TensorSpec, allowed: Sequence[str]) -> None:
        if tensor.dtype not in allowed:
            raise self.fail(f"tensor {tensor.name!r} has dtype {tensor.dtype}, supported: {', '.join(allowed)}")

    def require_float(self, *indices: int, outputs: Sequence[int] = (0,)) -> None:
        for i in indices:
            if self.has_input(i):
                self.require_dtype(self.input(i), ("float32",))
        for i in outputs:
            if self.has_output(i):
                self.require_dtype(self.output(i), ("float32",))

    def refuse_attrs(self, **unsupported: Callable[[AttributeValue], bool]) -> None:
        for name, is_bad in unsupported.items():
            if name in self.node.attributes and is_bad(self.node.attributes[name]):
                raise self.fail(f"attribute {name}={self.node.attributes[name]!r} is not supported")

    def axis(self, value: int, rank: int) -> int:
        axis = value + rank if value < 0 else value
        if not 0 <= axis < rank:
            raise self.fail(f"axis {value} is out of range for rank {rank}")
        return axis


def numel(shape: Sequence[int]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def strides_of(shape: Sequence[int]) -> list[int]:
    out, s = [0] * len(shape), 1
    for d in range(len(shape) - 1, -1, -1):
        out[d] = s
        s *= shape[d]
    return out


def broadcast_strides(shape: Sequence[int], out_shape: Sequence[int]) -> list[int]:
    """Element strides of `shape` read at each index of `out_shape` (numpy rules; 0 where broadcast)."""
    pad = [1] * (len(out_shape) - len(shape)) + list(shape)
    own = strides_of(pad)
    return [0 if pad[d] == 1 and out_shape[d] != 1 else own[d] for d in range(len(out_shape))]


def dims(values: Sequence[int]) -> list[int]:
    """A Dims literal list padded to MAX_RANK (scalars act as rank 1)."""
    vals = list(values) or [1]
    return vals + [0] * (MAX_RANK - len(vals))


def rank_of(ctx: NodeContext, shape: Sequence[int]) -> int:
    if len(shape) > MAX_RANK:
        raise ctx.fail(f"rank {len(shape)} is above the supported {MAX_RANK}")
    return max(1, len(shape))


Rule = Callable[[NodeContext], Kernel]
RULES: dict[str, Rule] = {}


def rule(*op_types: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for op_type in op_types:
            RULES[op_type] = fn
        return fn
    return register


def kernel(fn: str, params_type: str, units: int, unit_cost: float, max_tiles: int = 64,
           **fields: object) -> Kernel:
    return Kernel(fn, params_type, tuple((k, cpp(v)) for k, v in fields.items()), max(1, units),
                  unit_cost, max_tiles)

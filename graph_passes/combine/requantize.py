"""``--requantize``: one encoding for a tensor the requests quantize differently, covering both ranges.

Requests calibrated apart (``tools/realsize.py`` calibrates each request alone) quantize corresponding
activations with different scales, and a combined op has one encoding. The union of the requests'
ranges, [min_r scale_r (qmin - zero_r), max_r scale_r (qmax - zero_r)], becomes every request's encoding
of that tensor: its QuantizeLinear and every DequantizeLinear that reads it, in every request. The result
is a *requantized merged model*. A QuantizeLinear that re-quantizes such a tensor after an op that only
moves values (DQ -> Reshape -> Q, with the same encoding: how QDQ models wrap data movement) takes the new
encoding too, else QNN would insert a requantize op there. Combining the requantized model changes nothing more (verify.py compares the combined model
with it exactly), and its difference from the merged model is what the shared encoding costs (the report
gives each tensor's step before and after).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from hexfuse.graph_passes.combine.match import find_counterparts
from hexfuse.graph_passes.combine.view import RequestView

PREFIX = "hexfuse.requantized/"
MAX_PASSES = 8  # the fixed point below settles in two or three on the models seen
_RANGES = {onnx.TensorProto.UINT8: (0, 255), onnx.TensorProto.INT8: (-128, 127),
           onnx.TensorProto.UINT16: (0, 65535), onnx.TensorProto.INT16: (-32768, 32767)}


@dataclass(frozen=True)
class Requantized:
    tensor: str  # the first request's quantized tensor
    before: tuple[tuple[float, int], ...]  # per request: (scale, zero point)
    after: tuple[float, int]

    @property
    def coarser(self) -> tuple[float, ...]:
        """Per request: how many of its old quantization steps one new step spans."""
        return tuple(self.after[0] / scale for scale, _ in self.before)


def _encoding(values: dict[str, np.ndarray], node: onnx.NodeProto) -> tuple[np.ndarray, np.ndarray] | None:
    scale = values.get(node.input[1])
    zero = values.get(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if scale is None or scale.size != 1 or (zero is not None and zero.size != 1):
        return None  # per-channel activation encodings: not requantized
    return scale, zero if zero is not None else np.zeros((), np.uint8)


Encoding = tuple[float, int]
# ops that move quantized values without changing them: a Q after one of these (DQ -> op -> Q) that had the
# encoding of the Q before it keeps having it, else QNN inserts a requantize op there
MOVES = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Expand", "Slice", "Split", "Concat", "Gather",
                   "Flatten", "Identity", "MaxPool"})


def _union(encodings: list[Encoding], qmin: int, qmax: int) -> Encoding:
    low = min(s * (qmin - z) for s, z in encodings)
    high = max(s * (qmax - z) for s, z in encodings)
    low, high = min(low, 0.0), max(high, 0.0)  # zero stays exactly representable
    scale = float(np.float32((high - low) / (qmax - qmin) or 1.0))
    return scale, int(np.clip(np.round(qmin - low / scale), qmin, qmax))


def _ties(view: RequestView, nodes: list[onnx.NodeProto], original: dict[int, Encoding]) -> dict[int, int]:
    """Q node -> the Q before it whose values it re-quantizes unchanged with the same encoding
    (Q1 -> DQ -> a move -> Q2): they must keep one encoding."""
    ties = {}
    for index, node in enumerate(nodes):
        if node.op_type != "QuantizeLinear" or index not in original:
            continue
        move = view.producer.get(node.input[0])
        if move is None or nodes[move].op_type not in MOVES:
            continue
        dq = view.producer.get(nodes[move].input[0])
        if dq is None or nodes[dq].op_type != "DequantizeLinear":
            continue
        q = view.producer.get(nodes[dq].input[0])
        if q is not None and nodes[q].op_type == "QuantizeLinear" and original.get(q) == original[index]:
            ties[index] = q
    return ties


def requantize(view: RequestView, only: set[int] | None = None) -> tuple[onnx.ModelProto, list[Requantized]]:
    """The merged model with one encoding per corresponding quantized activation (where they differed),
    carried through the ops that only move quantized values (fixed point: a few passes). ``only``: the
    QuantizeLinear nodes (view indices) whose tuples may change; None: every tuple."""
    model = onnx.ModelProto()
    model.CopyFrom(view.model)
    graph = model.graph
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer
              if init.name in view.constant and np.prod(init.dims) <= 1}
    nodes = list(graph.node)
    original: dict[int, Encoding] = {}
    dtypes: dict[int, np.dtype] = {}
    for index, node in enumerate(nodes):
        if node.op_type == "QuantizeLinear" and len(node.input) > 1:
            found = _encoding(values, node)
            if found is not None:
                original[index] = (float(found[0]), int(found[1]))
                dtypes[index] = found[1].dtype
    ties = _ties(view, nodes, original)
    tuples = [t for t in find_counterparts(view).tuples if all(m in original for m in t)
              and (only is None or any(m in only for m in t))]
    in_tuple = {m for t in tuples for m in t}
    current = dict(original)
    for _ in range(MAX_PASSES):
        changed = False
        for members in tuples:
            upstream = [ties.get(m) for m in members]
            if all(u is not None for u in upstream) and len({current[u] for u in upstream}) == 1:
                target = current[upstream[0]]
            elif len({current[m] for m in members}) > 1:
                qmin, qmax = _RANGES.get(onnx.helper.np_dtype_to_tensor_dtype(dtypes[members[0]]), (0, 255))
                target = _union([current[m] for m in members], qmin, qmax)
            else:
                continue
            for member in members:
                changed |= current[member] != target
                current[member] = target
        for index, upstream in ties.items():
            if index not in in_tuple and current[index] != current[upstream]:
                current[index], changed = current[upstream], True
        if not changed:
            break
    changes: list[Requantized] = []
    done: set[int] = set()
    for members in [*tuples, *((i,) for i in ties if i not in in_tuple)]:
        if all(current[m] == original[m] for m in members) or members[0] in done:
            continue
        first = nodes[members[0]]
        scale, zero = current[members[0]]
        scale_name, zero_name = PREFIX + first.output[0] + ".scale", PREFIX + first.output[0] + ".zero_point"
        graph.initializer.extend([
            numpy_helper.from_array(np.array(scale, dtype=values[first.input[1]].dtype), scale_name),
            numpy_helper.from_array(np.array(zero, dtype=dtypes[members[0]]), zero_name)])
        for member in members:
            done.add(member)
            quantized = nodes[member].output[0]
            for node in [nodes[member], *(nodes[r] for r, _ in view.readers.get(quantized, ()))]:
                if node.op_type in ("QuantizeLinear", "DequantizeLinear") and \
                        (node is nodes[member] or node.input[0] == quantized):
                    node.input[1] = scale_name
                    if len(node.input) > 2:
                        node.input[2] = zero_name
                    else:
                        node.input.append(zero_name)
        changes.append(Requantized(first.output[0], tuple(original[m] for m in members), (scale, zero)))
    return model, changes

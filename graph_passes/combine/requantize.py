"""``--requantize``: one encoding for a tensor the requests quantize differently, covering both ranges.

Requests calibrated apart (``tools/realsize.py`` calibrates each request alone) quantize corresponding
activations with different scales, and a combined op has one encoding. The union of the requests'
ranges, [min_r scale_r (qmin - zero_r), max_r scale_r (qmax - zero_r)], becomes every request's encoding
of that tensor: its QuantizeLinear and every DequantizeLinear that reads it, in every request. The result
is a *requantized merged model*: combining it changes nothing more (verify.py compares the combined model
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


def requantize(view: RequestView) -> tuple[onnx.ModelProto, list[Requantized]]:
    """The merged model with one encoding per corresponding quantized activation (where they differed)."""
    model = onnx.ModelProto()
    model.CopyFrom(view.model)
    graph = model.graph
    values = {init.name: numpy_helper.to_array(init) for init in graph.initializer
              if init.name in view.constant and np.prod(init.dims) <= 1}
    nodes = list(graph.node)
    changes: list[Requantized] = []
    for members in find_counterparts(view).tuples:
        first = nodes[members[0]]
        if first.op_type != "QuantizeLinear" or len(first.input) < 2:
            continue
        encodings = [_encoding(values, nodes[m]) for m in members]
        if any(e is None for e in encodings) or len({(float(s), int(z)) for s, z in encodings}) == 1:
            continue
        zero_dtype = encodings[0][1].dtype
        qmin, qmax = _RANGES.get(onnx.helper.np_dtype_to_tensor_dtype(zero_dtype), (0, 255))
        low = min(float(s) * (qmin - int(z)) for s, z in encodings)
        high = max(float(s) * (qmax - int(z)) for s, z in encodings)
        low, high = min(low, 0.0), max(high, 0.0)  # zero stays exactly representable
        scale = np.float32((high - low) / (qmax - qmin) or 1.0)
        zero = np.array(np.clip(np.round(qmin - low / scale), qmin, qmax), dtype=zero_dtype)
        scale_name, zero_name = PREFIX + first.output[0] + ".scale", PREFIX + first.output[0] + ".zero_point"
        graph.initializer.extend([numpy_helper.from_array(np.array(scale, dtype=encodings[0][0].dtype), scale_name),
                                  numpy_helper.from_array(zero, zero_name)])
        for member in members:
            quantized = nodes[member].output[0]
            for node in [nodes[member], *(nodes[r] for r, _ in view.readers.get(quantized, ()))]:
                if node.op_type in ("QuantizeLinear", "DequantizeLinear") and \
                        (node is nodes[member] or node.input[0] == quantized):
                    node.input[1] = scale_name
                    if len(node.input) > 2:
                        node.input[2] = zero_name
                    else:
                        node.input.append(zero_name)
        changes.append(Requantized(first.output[0], tuple((float(s), int(z)) for s, z in encodings),
                                   (float(scale), int(zero))))
    return model, changes

"""Vision rows without torch: the Model Zoo topologies shipped in the ``onnx`` wheel (``light_*.onnx``, 224 px) with
their ``ConstantOfShape`` weights made seeded random initializers (a splat constant is not what a phone reads),
upgraded to opset 17, and a QDQ w8a8 copy made as tools/realsize.py quantizes. Used by tools/bench/fit_replay.py
(``--light``) where the torchvision exports of tools/anchors/zoo.py are not at hand.

    light_inception_v1 ~ googlenet, light_resnet50 ~ resnet50, light_densenet121 ~ densenet121

Not the torchvision graphs the published figures ran (Caffe2-zoo variants: ResNet-50 v1 strides, GoogLeNet
without LRN differences), so their rows compare the replay with itself more than with the phones.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, version_converter

LIGHT = {"googlenet": "light_inception_v1", "resnet50": "light_resnet50", "densenet121": "light_densenet121"}
SEED = 20261
OPSET = 17


def light_dir() -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def materialize(model: onnx.ModelProto, seed: int = SEED) -> onnx.ModelProto:
    """Every ConstantOfShape with a constant shape becomes a random initializer (std 0.05, BN variances 1)."""
    rng = np.random.default_rng(seed)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    kept = []
    for node in g.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(v) for v in numpy_helper.to_array(inits[node.input[0]]))
            value = rng.standard_normal(shape).astype(np.float32) * 0.05
            if any(tag in node.output[0] for tag in ("_var", "_riv", "_s_", "scale")):  # BN scales, variances
                value = 1.0 + np.abs(value)
            g.initializer.append(numpy_helper.from_array(value, node.output[0]))
            continue
        kept.append(node)
    del g.node[:]
    g.node.extend(kept)
    names = {t.name for t in g.initializer}
    keep_inputs = [i for i in g.input if i.name not in names]
    del g.input[:]
    g.input.extend(keep_inputs)
    used = {n for node in g.node for n in node.input}
    for t in [t for t in g.initializer if t.name not in used]:
        g.initializer.remove(t)
    model.ir_version = 7  # initializers need not be graph inputs
    return version_converter.convert_version(model, OPSET)


def build(name: str, folder: Path, precision: str = "float") -> Path:
    """``folder/<name>.onnx`` (float) or ``<name>_w8a8.onnx`` (QDQ), made when missing."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / (f"{name}_w8a8.onnx" if precision == "w8a8" else f"{name}.onnx")
    if out.is_file():
        return out
    float_path = folder / f"{name}.onnx"
    if not float_path.is_file():
        model = materialize(onnx.load(str(light_dir() / f"{LIGHT[name]}.onnx")))
        onnx.save(model, str(float_path))
    if precision == "float":
        return float_path
    from onnxruntime.quantization import CalibrationDataReader, QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    model = onnx.load(str(float_path))
    feed = model.graph.input[0]
    shape = [d.dim_value or 1 for d in feed.type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.left = [{feed.name: np.random.default_rng(SEED + i).standard_normal(shape).astype(np.float32)}
                         for i in range(2)]

        def get_next(self):
            return self.left.pop() if self.left else None

    with tempfile.TemporaryDirectory(dir=folder) as td:
        tmp = Path(td) / "q.onnx"
        cfg = get_qnn_qdq_config(str(float_path), Reader(), activation_type=QuantType.QUInt8, weight_type=QuantType.QUInt8)
        quantize(str(float_path), str(tmp), cfg)
        os.replace(tmp, out)
    return out

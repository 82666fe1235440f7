"""tools/anchors/light.py: the Model Zoo graphs of the onnx wheel with real (random) weights instead of splat
ConstantOfShape ones, at a current opset, run on ONNX Runtime and give finite outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from hexfuse.tools.anchors.light import OPSET, light_dir, materialize


def test_materialized_graph_holds_its_weights_and_runs():
    model = materialize(onnx.load(str(light_dir() / "light_inception_v1.onnx")))
    assert not any(n.op_type == "ConstantOfShape" for n in model.graph.node)
    assert model.opset_import[0].version == OPSET and len(model.graph.initializer) > 100
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert len({float(np.std(w)) for w in weights.values() if w.size > 100}) > 10  # not one splat value
    feed = model.graph.input[0]
    shape = [d.dim_value for d in feed.type.tensor_type.shape.dim]
    assert shape == [1, 3, 224, 224]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {feed.name: np.random.default_rng(0).standard_normal(shape).astype(np.float32)})
    assert out.shape == (1, 1000) and np.isfinite(out).all()

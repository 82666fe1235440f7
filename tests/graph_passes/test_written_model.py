"""The written model keeps the original's meaning for runtimes: constants stay constants past IR 3."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnxruntime as ort

from tests.passes import fuse_model
from tests import builders


def _with_ir(model: onnx.ModelProto, ir: int, list_initializers: bool) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.ir_version = ir
    if list_initializers:  # IR 3 style: every initializer is also a graph input
        known = {i.name for i in out.graph.input}
        out.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                               for t in out.graph.initializer if t.name not in known)
    return out


def _fuse(model: onnx.ModelProto, tmp_path: Path):
    path = builders.save(model, tmp_path / "m.onnx")
    result = fuse_model(path)
    assert result.changed
    return result, onnx.load_model_from_string(result.model_bytes)


def test_ir3_initializers_leave_graph_input(tmp_path):
    result, fused = _fuse(_with_ir(builders.two_branch(), 3, list_initializers=True), tmp_path)
    inits = {t.name for t in fused.graph.initializer}
    assert fused.ir_version >= 8 and inits
    assert [i.name for i in fused.graph.input] == ["x"]
    text = " ".join(result.model_changes)
    assert "IR version 3 -> " in text and "2 initializers no longer listed in graph.input" in text


def test_overridable_initializers_of_ir4_models_stay_inputs(tmp_path):
    """From IR 4 on an initializer listed as input means 'overridable': the original said so, keep it."""
    result, fused = _fuse(_with_ir(builders.two_branch(), 7, list_initializers=True), tmp_path)
    assert {i.name for i in fused.graph.input} == {"x", "w", "two"}
    assert not any("graph.input" in line for line in result.model_changes)


def _optimized_nodes(model: str | bytes, tmp_path: Path) -> int:
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    so.log_severity_level = 3
    ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    return len(onnx.load(str(tmp_path / "optimized.onnx")).graph.node)


def test_light_inception_v2_fused_optimizes_like_the_original(tmp_path):
    """Before the fix: 129 nodes after ORT optimization for the original, 941 for the fused model."""
    path = builders.light_model("inception_v2")
    result = fuse_model(path, builders.unfolded_activation_scorer())  # see tests/builders.py
    assert result.changed
    assert _optimized_nodes(path, tmp_path) == _optimized_nodes(result.model_bytes, tmp_path)
    assert any("opset 9 -> 13" in line for line in result.model_changes)

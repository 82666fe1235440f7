"""A bool tensor crossing the fused op's boundary: generated, built and run like any other port."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hexfuse.cli import main as hexfuse_main
from hexfuse.graph_passes.spec.model import load_spec
from hexfuse.op_package.build import build_host
from hexfuse.op_package.host import HostPackage
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree
from tests.op_package._harness import capture, compare


def _model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul"),
        helper.make_node("Less", ["z", "zero"], ["negative"], name="less"),
    ]
    graph = helper.make_graph(
        nodes, "bool_port",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [64, 64]) for n in ("x", "z")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64]),
         helper.make_tensor_value_info("negative", TensorProto.BOOL, [64, 64])],
        [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array(0.0, np.float32), "zero")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_bool_output_port_generates_builds_and_matches_onnxruntime(tmp_path):
    source = tmp_path / "bool_port.onnx"
    onnx.save(_model(), source)
    fused = tmp_path / "fused.onnx"
    assert hexfuse_main(["fuse", str(source), "-o", str(fused), "--min-gain", "0", "--as-designed", "--no-verify"]) == 0
    spec = load_spec(str(fused.with_suffix(".hexfuse.json")))
    (op,) = spec.fused_ops
    assert "bool" in {t.dtype for t in op.outputs}
    files = render_package(spec)
    assert any("QNN_DATATYPE_BOOL_8" in text for text in files.values())
    package = HostPackage(build_host(write_tree(files, tmp_path / "pkg")), spec)
    values = capture(source, fused, spec)
    for serial in (False, True):
        outputs = package.run(op.op_type, [values[t.name] for t in op.inputs], serial=serial)[0]
        for tensor, ours in zip(op.outputs, outputs):
            assert compare(tensor.name, ours, values[tensor.name]) is None

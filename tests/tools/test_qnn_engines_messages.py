"""What `hexfuse engines` says when it cannot make a map: the nodes HTP would not run (by op type, with
what to do), and, without the [qnn] extra, the package to install, not a flag the user never passed."""

from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from hexfuse.cli import main
from hexfuse.tools import qnn_engines


def _relu_then_det(path: Path) -> Path:
    """Det has no HTP kernel: ONNX Runtime leaves it to the CPU EP, which engines refuses."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"), helper.make_node("Det", ["r"], ["y"], name="det0")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, path)
    return path


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn not installed (the [qnn] extra)")
def test_nodes_left_to_the_cpu_are_named_with_their_op_type_and_what_to_do(tmp_path: Path, capsys) -> None:
    model = _relu_then_det(tmp_path / "fb.onnx")
    assert main(["engines", str(model), "--target", "sm8650", "-o", str(tmp_path / "map.json")]) == 1
    err = capsys.readouterr().err
    assert "cannot run 1 node(s) of fb.onnx on HTP" in err and "Det x1 ('det0')" in err and "What to do" in err
    assert "relu0" not in err and not (tmp_path / "map.json").exists()


def test_the_message_groups_nodes_by_op_type() -> None:
    text = qnn_engines.fallback_message(Path("m.onnx"), [("a", "Det"), ("b", "Det"), ("c", "NonZero"), ("d", "Det"),
                                                          ("e", "Det")])
    assert "cannot run 5 node(s)" in text and "Det x4 ('a', 'b', 'd', ...); NonZero x1 ('c')" in text
    assert "ONNX Runtime did not say which" in qnn_engines.fallback_message(Path("m.onnx"), [])


def test_without_the_qnn_extra_it_names_the_package_not_a_flag(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(qnn_engines, "qnn_installed", lambda: False)
    model = _relu_then_det(tmp_path / "fb.onnx")
    assert main(["engines", str(model), "--target", "sm8650"]) == 1
    err = capsys.readouterr().err
    assert "pip install 'hexfuse[qnn]'" in err and "--ep" not in err and "preparing" not in err

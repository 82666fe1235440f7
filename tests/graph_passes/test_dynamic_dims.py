"""Dynamic shapes: the report and the message name the symbolic dims, and ``--fix-dim`` pins them
(ONNX Runtime's ``make_dynamic_shape_fixed``) so that a dynamic-batch export fuses."""

from __future__ import annotations

import json
import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.cli import main
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.model import fixed_dims, load_model, parse_fix_dim, pin_arguments, symbolic_dims


def dynamic_batch_export(batch: str = "batch_size") -> onnx.ModelProto:
    """x[batch, 256] -> MatMul(W) -> a  beside  x -> Softmax -> Mul(0.5) -> b, as a PyTorch export with
    ``dynamic_axes={"x": {0: "batch_size"}, ...}`` writes it (value_info carrying the symbolic dim too)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="proj"),
             helper.make_node("Softmax", ["x"], ["s"], name="softmax", axis=-1),
             helper.make_node("Mul", ["s", "half"], ["b"], name="scale")]
    graph = helper.make_graph(
        nodes, "dynamic_batch", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 256])],
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [batch, 256]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, [batch, 256])],
        [numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "w"),
         numpy_helper.from_array(np.array(0.5, np.float32), "half")],
        value_info=[helper.make_tensor_value_info("s", TensorProto.FLOAT, [batch, 256])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture()
def exported(tmp_path):
    path = tmp_path / "export.onnx"
    onnx.save(dynamic_batch_export(), path)
    return path


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_report_and_the_message_name_the_symbolic_dims(exported, tmp_path, capsys):
    code, out, err = _run(capsys, "analyze", str(exported), "--allow-scalar", "--as-designed")
    assert code == 0 and "fused groups: 0" in out
    assert "symbolic dims `batch_size` (x[0], a[0], b[0])" in out and "--fix-dim batch_size=VALUE" in out
    assert "dynamic shapes (symbolic dims batch_size)" in err and "--fix-dim batch_size=VALUE" in err
    code, out, _ = _run(capsys, "analyze", str(exported), "--allow-scalar", "--as-designed", "--json")
    assert json.loads(out)["model"]["symbolic_dims"] == {"batch_size": ["x[0]", "a[0]", "b[0]"]}
    code, _, err = _run(capsys, "fuse", str(exported), "-o", str(tmp_path / "out" / "f.onnx"), "--allow-scalar", "--as-designed")
    assert code == 0 and "nothing to fuse" in err and "--fix-dim batch_size=VALUE" in err
    assert "symbolic dims `batch_size`" in (tmp_path / "out" / "f.hexfuse.md").read_text()


def test_a_dynamic_batch_export_fuses_after_fix_dim(exported, tmp_path, capsys):
    out = tmp_path / "fused.onnx"
    code, _, err = _run(capsys, "fuse", str(exported), "-o", str(out), "--allow-scalar", "--as-designed", "--fix-dim", "batch_size=8")
    assert code == 0, err
    assert "wrote" in err and "1 fused node " in err  # verified against the file on ONNX Runtime CPU
    fused = onnx.load(out)
    assert [d.dim_value for d in fused.graph.input[0].type.tensor_type.shape.dim] == [8, 256]
    assert any(n.domain == "hexfuse" for n in fused.graph.node)
    report = out.with_suffix(".hexfuse.md").read_text()
    assert "symbolic dims pinned (--fix-dim): `batch_size`=8" in report and "dynamic shapes:" not in report
    assert exported.read_bytes() == onnx.load(exported).SerializeToString()  # the input file is untouched


def test_fix_dim_works_like_make_dynamic_shape_fixed(exported):
    loaded = load_model(exported, {"batch_size": 4})
    graph = loaded.model.graph
    for info in (*graph.input, *graph.output, *graph.value_info):
        assert [d.dim_value for d in info.type.tensor_type.shape.dim] == [4, 256], info.name
    assert symbolic_dims(graph) == {} and loaded.fixed_dims == (("batch_size", 4),)
    assert symbolic_dims(load_model(exported).model.graph) == {"batch_size": ["x[0]", "a[0]", "b[0]"]}
    with fixed_dims({"batch_size": 2}):  # the CLI's way in: every load inside the block
        assert load_model(exported).model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 2
    assert load_model(exported).fixed_dims == ()


@pytest.mark.parametrize("argv, message", [
    (["--fix-dim", "N=8"], "--fix-dim N: no dimension is named 'N' (symbolic dims: batch_size)"),
    (["--fix-dim", "batch_size=0"], "expected NAME=VALUE with a positive integer VALUE"),
    (["--fix-dim", "batch_size"], "expected NAME=VALUE"),
])
def test_bad_fix_dim_is_one_line_error_and_writes_nothing(exported, tmp_path, capsys, argv, message):
    before = sorted(os.listdir(tmp_path))
    code, _, err = _run(capsys, "fuse", str(exported), "-o", str(tmp_path / "f.onnx"), *argv)
    assert code == 1 and err.count("hexfuse: error:") == 1 and message in err
    assert sorted(os.listdir(tmp_path)) == before


def test_parse_fix_dim():
    assert parse_fix_dim(" N = 16") == ("N", 16)
    with pytest.raises(HexfuseError):
        parse_fix_dim("=3")


def test_fix_dim_with_micro_batches(tmp_path, capsys):
    """The split model is made from the pinned one: the pins are not applied to it again."""
    path = tmp_path / "tokens.onnx"
    model = dynamic_batch_export("tokens")
    onnx.save(model, path)
    code, _, err = _run(capsys, "analyze", str(path), "--allow-scalar", "--as-designed", "--fix-dim", "tokens=64", "--micro-batches", "2")
    assert code == 0 and "micro-batches:" in err and "error" not in err, err


def unnamed_batch_export() -> onnx.ModelProto:
    """The export above with the input's batch dim left unnamed and an output's named on its own: what
    some exporters write (e.g. ch_PP-OCRv4_det asked for six names, outputs included)."""
    model = dynamic_batch_export()
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "rows_out"
    model.graph.output[1].type.tensor_type.shape.dim[0].Clear()
    del model.graph.value_info[:]
    return model


def test_pins_are_asked_for_the_inputs_only_and_unnamed_dims_by_position(tmp_path, capsys):
    path = tmp_path / "unnamed.onnx"
    onnx.save(unnamed_batch_export(), path)
    graph = load_model(path).model.graph
    assert set(symbolic_dims(graph)) == {"?", "rows_out"}  # both listed where they sit
    assert pin_arguments(graph) == ["x[0]=VALUE"]  # the output's follows from the input by shape inference
    code, out, err = _run(capsys, "analyze", str(path))
    assert code == 0
    assert "--fix-dim 'x[0]=VALUE'" in out and "cannot be pinned" not in out and "rows_out=VALUE" not in out
    assert "--fix-dim 'x[0]=VALUE'" in err and "rows_out=VALUE" not in err


def test_an_unnamed_input_dim_is_pinned_by_position(tmp_path, capsys):
    path = tmp_path / "unnamed.onnx"
    onnx.save(unnamed_batch_export(), path)
    pinned = load_model(path, {"x[0]": 8}).model.graph
    assert [d.dim_value for d in pinned.input[0].type.tensor_type.shape.dim] == [8, 256]
    assert pin_arguments(pinned) == []  # nothing left to pin on the inputs
    out = tmp_path / "fused.onnx"
    code, _, err = _run(capsys, "fuse", str(path), "-o", str(out), "--allow-scalar", "--as-designed",
                        "--fix-dim", "x[0]=8")
    assert code == 0 and "1 fused node " in err, err
    for bad, message in (("x[2]=8", "input 'x' has rank 2"), ("y[0]=8", "pinned by its place on an input")):
        code, _, err = _run(capsys, "analyze", str(path), "--fix-dim", bad)
        assert code == 1 and message in err, err

"""Class 5, verification false alarms: external-data models failed plain `hexfuse fuse` (ONNX Runtime
got raw bytes and could not find the data), NaN or Inf in identical outputs counted as mismatches,
and inputs verification cannot make crashed it. Now ORT gets the model with its data inlined, NaN
equals NaN and an infinity the same infinity, and an input it cannot make is one line saying so."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from hexfuse.graph_passes.rewrite.ort_check import diff, random_inputs
from tests import builders
from tests.hardening._support import one_error, run


@pytest.mark.parametrize("opset", [17, 11])  # 11: upgraded, so the original file runs on ORT too
def test_external_data_models_verify(tmp_path, capsys, opset):
    model = builders.two_branch(32)
    model.opset_import[0].version = opset
    model.ir_version = 8 if opset == 17 else 6
    onnx.save(model, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    code, err = run(capsys, "fuse", tmp_path / "m.onnx", "-o", tmp_path / "f.onnx", "--min-gain", "0", "--allow-scalar")
    assert code == 0 and "1 fused node " in err, err
    report = (tmp_path / "f.hexfuse.md").read_text()
    assert ("the original file ran too" in report) == (opset == 11)


def test_nan_and_infinity_in_identical_outputs_are_equal(tmp_path, capsys):
    """A Log -> Sqrt branch on random-normal inputs gives NaN (negative inputs) in both models."""
    size = 32
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             helper.make_node("Log", ["x"], ["l"], name="log"),
             helper.make_node("Sqrt", ["l"], ["s"], name="sqrt")]
    model = builders._model(nodes, [builders.float_info("x", (size, size))],
                            [builders.float_info("y", (size, size)), builders.float_info("s", (size, size))],
                            [builders._weight(np.random.default_rng(0), "w", (size, size))])
    source = builders.save(model, tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--allow-scalar")
    assert code == 0 and "1 fused node " in err, err


@pytest.mark.parametrize("want, got, equal", [
    ([np.nan, 1.0], [np.nan, 1.0], True),
    ([np.inf, -np.inf, 2.0], [np.inf, -np.inf, 2.0], True),
    ([np.nan, 1.0], [0.0, 1.0], False),      # NaN against a number
    ([np.inf, 1.0], [-np.inf, 1.0], False),  # opposite infinities
    ([np.inf, 1.0], [1e30, 1.0], False),     # infinity against a finite value
    ([1.0, 2.0], [1.0, 2.5], False),
])
def test_diff_treats_nan_and_inf_as_values(want, got, equal):
    result = diff("t", np.array(want, np.float32), np.array(got, np.float32))
    assert result.equal is equal


def _with_input(info: onnx.ValueInfoProto, opset: int = 17) -> onnx.ModelProto:
    """two_branch plus one input the pass never touches (an Identity passes it through)."""
    model = builders.two_branch(32)
    model.graph.input.append(info)
    model.graph.node.append(helper.make_node("Identity", [info.name], ["passed"], name="pass"))
    passed = onnx.ValueInfoProto()
    passed.CopyFrom(info)
    passed.name = "passed"
    model.graph.output.append(passed)
    model.opset_import[0].version = opset
    return model


@pytest.mark.parametrize("info, needle", [
    (helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [4]), "its type is sequence"),
    (helper.make_value_info("opt", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [4]))),
     "its type is optional"),
    (helper.make_tensor_value_info("huge", TensorProto.FLOAT, [2**63 - 1]), "more than verification feeds"),
    (helper.make_tensor_value_info("big", TensorProto.FLOAT, [2**20, 2**10]), "more than verification feeds"),
    (helper.make_tensor_value_info("dyn", TensorProto.FLOAT, ["batch", 4]), "dimension 0 is dynamic ('batch')"),
    (helper.make_tensor_value_info("text", TensorProto.STRING, [4]), "is not a number"),
])
def test_inputs_verification_cannot_make_are_one_line(tmp_path, capsys, info, needle):
    source = builders.save(_with_input(info, opset=18), tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--allow-scalar")
    line = one_error(err)
    assert code == 1 and "verification cannot generate input" in line and needle in line and "--no-verify" in line
    assert not (tmp_path / "f.onnx").exists()
    assert run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--allow-scalar", "--no-verify")[0] == 0


def test_a_static_empty_dimension_is_not_dynamic(tmp_path, capsys):
    info = helper.make_tensor_value_info("empty", TensorProto.FLOAT, [0, 64])
    assert random_inputs(_with_input(info))["empty"].shape == (0, 64)
    source = builders.save(_with_input(info), tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--allow-scalar")
    assert code == 0 and "1 fused node " in err, err

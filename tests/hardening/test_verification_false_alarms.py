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
    code, err = run(capsys, "fuse", tmp_path / "m.onnx", "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
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
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
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


@pytest.mark.parametrize("want, got", [
    ([1.0, -0.0, 3.5], [1.0, 0.0, 3.5]),  # signed zeros are equal
    ([np.inf, -np.inf, 2.0], [np.inf, -np.inf, 2.0]),
    ([0.0, 0.0], [0.0, 0.0]),
])
def test_diff_of_equal_outputs_is_exactly_zero(want, got):
    """Equal arrays take one comparison, not the float64 path: the figures that path gives them."""
    result = diff("t", np.array(want, np.float32), np.array(got, np.float32))
    assert (result.max_abs, result.max_rel) == (0.0, 0.0) and result.equal


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
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
    line = one_error(err)
    assert code == 1 and "verification cannot generate input" in line and needle in line and "--no-verify" in line
    assert not (tmp_path / "f.onnx").exists()
    assert run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar", "--no-verify")[0] == 0


def test_a_static_empty_dimension_is_not_dynamic(tmp_path, capsys):
    info = helper.make_tensor_value_info("empty", TensorProto.FLOAT, [0, 64])
    assert random_inputs(_with_input(info))["empty"].shape == (0, 64)
    source = builders.save(_with_input(info), tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 0 and "1 fused node " in err, err


def _conv_bn(opset: int, batch: int | str) -> onnx.ModelProto:
    """Conv -> BatchNormalization -> Elu -> Conv -> Sigmoid beside Elu -> Sigmoid: ORT's default level
    folds the batch norm into the conv, which rounds differently from running the nodes as written."""
    rng = np.random.default_rng(5)

    def weight(name, shape):
        return onnx.numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    variance = onnx.numpy_helper.from_array(np.abs(rng.standard_normal(8)).astype(np.float32) + 0.5, "v")
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("BatchNormalization", ["c", "s", "bb", "mm", "v"], ["bn"], name="bn"),
             helper.make_node("Elu", ["bn"], ["r"], name="elu"),
             helper.make_node("Conv", ["r", "cw2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Sigmoid", ["c2"], ["y"], name="sig"),
             helper.make_node("Elu", ["x"], ["e2"], name="elu2"), helper.make_node("Sigmoid", ["e2"], ["y2"], name="sig2")]
    graph = helper.make_graph(
        nodes, "conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8, 8, 8]),
         helper.make_tensor_value_info("y2", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [weight("cw", [8, 3, 3, 3]), weight("cb", [8]), weight("s", [8]), weight("bb", [8]), weight("mm", [8]), variance,
         weight("cw2", [8, 8, 3, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8 if opset > 11 else 6)


FUSE_ALL = ("--allow-scalar", "--min-gain", "0", "--as-designed", "--allow-merge-only")
SPLIT = ("--micro-batches", "2", "--split", "always", "--force")


@pytest.mark.parametrize("edit", ["opset upgrade", "micro-batch split"])
def test_the_file_runs_at_the_fused_models_optimization_level(tmp_path, capsys, edit):
    """The check against the file ran the file at ORT's default level and the fused model with
    optimizations off: the folded batch norm's rounding (2e-6) failed exact rewrites."""
    model = _conv_bn(11, 1) if edit == "opset upgrade" else _conv_bn(17, 4)
    source = builders.save(model, tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", *FUSE_ALL, *(SPLIT if edit != "opset upgrade" else ()))
    assert code == 0, err
    assert "the original file ran too" in (tmp_path / "f.hexfuse.md").read_text()


def test_an_int8_qdq_split_verifies(tmp_path, capsys):
    """At the default level ORT runs the file's int8 QDQ MatMuls as QLinearMatMul: 0.2 apart."""
    from tests.graph_passes.microbatch_models import qdq_token_mlp

    model = qdq_token_mlp()
    for init in model.graph.initializer:  # the same chain in int8: codes and zero points
        if init.data_type == TensorProto.UINT8:
            codes = onnx.numpy_helper.to_array(init).astype(np.int16) - 128
            init.CopyFrom(onnx.numpy_helper.from_array(codes.astype(np.int8), init.name))
    source = builders.save(model, tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", *FUSE_ALL, *SPLIT)
    assert code == 0, err
    assert "split into 2 micro-batches" in err


@pytest.mark.parametrize("edit", ["opset upgrade", "micro-batch split"])
def test_pinned_dims_reach_the_run_of_the_file(tmp_path, capsys, edit):
    """The inputs for the check against the file came from the file itself, where N is symbolic."""
    model = _conv_bn(11, "N") if edit == "opset upgrade" else _conv_bn(17, "N")
    source = builders.save(model, tmp_path / "m.onnx")
    extra = ("--fix-dim", "N=4", *(SPLIT if edit != "opset upgrade" else ()))
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", *FUSE_ALL, *extra)
    assert code == 0, err
    assert "the original file ran too" in (tmp_path / "f.hexfuse.md").read_text()


def test_ids_into_a_small_table_stay_in_range(tmp_path, capsys):
    """Seeded ids were 0-7 for every integer input: into a 4-row Gather table ORT refused the run, so
    verification (and `ab`) refused a valid model. Now they stay below the table's rows."""
    source = builders.save(builders.embedding_branches(rows=4), tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", *FUSE_ALL)
    assert code == 0, err
    code, err = run(capsys, "ab", source, tmp_path / "f.onnx", "--no-cpu-package", "-q", "-o", tmp_path / "r")
    assert code == 0, err

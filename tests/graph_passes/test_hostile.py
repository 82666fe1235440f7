"""Odd and hostile models: each case named, with the outcome the pass must give."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from hexfuse.cli import main
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load import model as load_module
from hexfuse.graph_passes.rewrite.ort_check import compare_on_cpu
from hexfuse.graph_passes.select.balance import BalanceScorer
from tests.passes import analyze_model, fuse_model
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN
from tests import builders

ANY_GAIN = BalanceScorer(min_gain=0.0)


def _fuse_and_check(tmp_path, model: onnx.ModelProto):
    path = builders.save(model, tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    onnx.checker.check_model(onnx.load_model_from_string(result.model_bytes), full_check=True)
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))
    return result


def test_external_data_is_loaded_and_the_fused_model_matches(tmp_path):
    model = builders.two_branch(96)
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.data", size_threshold=0)
    result = fuse_model(tmp_path / "ext.onnx", ANY_GAIN)
    assert result.changed
    assert all(d.equal for d in compare_on_cpu(onnx.load(tmp_path / "ext.onnx").SerializeToString(), result.model_bytes))


def test_missing_external_data_file_is_a_clear_error(tmp_path):
    model = builders.two_branch(96)
    onnx.save(model, tmp_path / "ext.onnx", save_as_external_data=True, location="ext.data", size_threshold=0)
    (tmp_path / "ext.data").unlink()
    with pytest.raises(HexfuseError, match="external data"):
        fuse_model(tmp_path / "ext.onnx")


def test_models_over_the_protobuf_limit_are_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(load_module, "PROTOBUF_LIMIT", 1000)  # stands in for 2 GiB of external weights
    path = builders.save(builders.two_branch(96), tmp_path / "m.onnx")
    with pytest.raises(HexfuseError, match="over protobuf's 2 GiB limit"):
        fuse_model(path)


def test_duplicate_node_names_fuse_but_onnxruntime_refuses_to_verify(tmp_path, capsys):
    model = builders.crossing_pairs()
    for node in model.graph.node:
        node.name = "same"
    path = builders.save(model, tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)  # the pass never relies on node names
    assert result.changed
    onnx.checker.check_model(onnx.load_model_from_string(result.model_bytes), full_check=True)
    # ONNX Runtime rejects the original itself; verification says so on one line and writes nothing.
    # (its Relu left unfolded: a MatMul + Relu task has no QNN translation yet, tests/builders.py)
    assert main(["fuse", path, "-o", str(tmp_path / "out.onnx"), "--min-gain", "0", "--as-designed",
                 "--target", builders.unfolded_activation_target()]) == 1
    assert "two nodes with same node name" in capsys.readouterr().err
    assert not (tmp_path / "out.onnx").exists()


def test_empty_node_names(tmp_path):
    model = builders.crossing_pairs()
    for node in model.graph.node:
        node.name = ""
    assert _fuse_and_check(tmp_path, model).changed


def test_tensors_named_like_generated_names(tmp_path):
    model = builders.two_branch(96)
    first = fuse_model(builders.save(model, tmp_path / "probe.onnx"), ANY_GAIN).spec.fused_ops[0]
    # Rename the model's tensors and nodes to exactly what the pass would generate.
    renames = {"sm": first.node_name, "s": first.op_type}
    for node in model.graph.node:
        node.input[:] = [renames.get(n, n) for n in node.input]
        node.output[:] = [renames.get(n, n) for n in node.output]
    model.graph.output[1].name = renames["s"]
    model.graph.node[0].name = first.node_name
    result = _fuse_and_check(tmp_path, model)
    fused = onnx.load_model_from_string(result.model_bytes)
    fused_node = next(n for n in fused.graph.node if n.domain == FUSED_DOMAIN)
    assert fused_node.op_type != first.op_type and fused_node.name != first.node_name


def test_graph_output_that_is_also_a_graph_input(tmp_path):
    model = builders.two_branch(96)
    model.graph.output.append(helper.make_tensor_value_info("x", TensorProto.FLOAT, [96, 96]))
    assert _fuse_and_check(tmp_path, model).changed


def test_initializer_that_is_a_graph_output(tmp_path):
    model = builders.two_branch(96)
    model.graph.output.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [96, 96]))
    assert _fuse_and_check(tmp_path, model).changed


def test_output_also_consumed_inside_the_graph(tmp_path):
    model = builders.two_branch(96)
    model.graph.output.append(helper.make_tensor_value_info("sm", TensorProto.FLOAT, [96, 96]))
    result = _fuse_and_check(tmp_path, model)
    assert "sm" in [t.name for t in result.spec.fused_ops[0].outputs]


def _if_model() -> onnx.ModelProto:
    then_graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "then", [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, [8, 8])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["n"])], "else", [], [helper.make_tensor_value_info("n", TensorProto.FLOAT, [8, 8])])
    model = builders.two_branch(8)
    model.graph.node.append(helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then_graph, else_branch=else_graph))
    model.graph.input.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    model.graph.output.append(helper.make_tensor_value_info("branch", TensorProto.FLOAT, [8, 8]))
    return model


def test_control_flow_nodes_are_left_alone(tmp_path):
    result = _fuse_and_check(tmp_path, _if_model())
    fused = onnx.load_model_from_string(result.model_bytes)
    assert any(node.op_type == "If" for node in fused.graph.node)
    assert all(node.op_type != "If" for op in result.spec.fused_ops for task in op.tasks for node in task.nodes)
    assert any("control flow" in (u.blocker or "") for u in result.analyzed.analysis.units.units)


def test_custom_domain_ops_are_opaque_barriers(tmp_path):
    model = builders.two_branch(96)
    model.graph.node.append(helper.make_node("Mystery", ["y"], ["z"], name="mystery", domain="com.example"))
    model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [96, 96]))
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    result = analyze_model(builders.save(model, tmp_path / "m.onnx"), ANY_GAIN)
    mystery = next(u for u in result.analysis.units.units if result.analysis.flow.nodes[u.core].name == "mystery")
    assert not mystery.fusable and "not an op hexfuse knows" in mystery.blocker
    assert all(n.name != "mystery" for op in result.fused_ops for t in op.tasks for n in t.nodes)
    assert result.fused_ops  # the known ops around the barrier still fuse


@pytest.mark.parametrize("case", ["external_missing", "over_limit", "if", "custom"])
def test_cli_never_shows_a_traceback(tmp_path, capsys, monkeypatch, case):
    model = builders.two_branch(96)
    if case == "external_missing":
        onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="d.bin", size_threshold=0)
        (tmp_path / "d.bin").unlink()
    elif case == "over_limit":
        monkeypatch.setattr(load_module, "PROTOBUF_LIMIT", 1000)
        builders.save(model, tmp_path / "m.onnx")
    elif case == "if":
        builders.save(_if_model(), tmp_path / "m.onnx")
    else:
        model.graph.node.append(helper.make_node("Mystery", ["y"], ["z"], name="mystery", domain="com.example"))
        model.graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, [96, 96]))
        model.opset_import.append(helper.make_opsetid("com.example", 1))
        builders.save(model, tmp_path / "m.onnx")
    code = main(["fuse", str(tmp_path / "m.onnx"), "-o", str(tmp_path / "out.onnx"), "--no-verify"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert code in (0, 1)
    if code == 1:
        assert len([line for line in err.splitlines() if line.startswith("hexfuse: error:")]) == 1


class _Unwritable:
    """A fused model protobuf refuses to serialize (over its 2 GiB limit), sized or not."""

    def __init__(self, size: int | None) -> None:
        self.size = size

    def SerializeToString(self) -> bytes:
        raise ValueError("Message onnx.ModelProto exceeds maximum protobuf size of 2GB")

    def ByteSize(self) -> int:
        if self.size is None:
            raise ValueError("too large to size")
        return self.size


@pytest.mark.parametrize("size, words", [(3 * 2**30, "3.00 GiB"), (None, "over 2 GiB")])
def test_a_fused_model_over_protobufs_limit_is_one_clear_error(size, words):
    from pathlib import Path

    from hexfuse.graph_passes.pipeline import _serialized

    with pytest.raises(HexfuseError, match=f"m.onnx: the fused model would be {words}, over protobuf's 2 GiB limit"):
        _serialized(Path("m.onnx"), _Unwritable(size))

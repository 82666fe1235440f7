"""What `hexfuse fuse` proves before writing: the structure of every fused node, the numbers of every op type."""

from __future__ import annotations

import os

import onnx
import onnx.inliner
import pytest

from tests.passes import fuse_model
from hexfuse.cli import main
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.pipeline import FuseResult
from hexfuse.graph_passes.report import outputs as outputs_module
from hexfuse.graph_passes.report.outputs import verify_result
from hexfuse.graph_passes.rewrite import verify as verify_module
from hexfuse.graph_passes.select.balance import BalanceScorer
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN
from tests import builders

ANY_GAIN = BalanceScorer(min_gain=0.0)


def _result(tmp_path, blocks: int = 3) -> FuseResult:
    return fuse_model(builders.save(builders.twin_blocks(((64, 64),) * blocks), tmp_path / "m.onnx"), ANY_GAIN)


def _tampered(result: FuseResult, edit) -> FuseResult:
    model = onnx.load_model_from_string(result.model_bytes)
    edit(model)
    return FuseResult(result.analyzed, model.SerializeToString(), result.spec, result.changed)


def test_a_good_fused_model_verifies_and_says_how(tmp_path):
    verification = verify_result(_result(tmp_path))
    assert verification.equal and verification.fused_nodes == 3 and verification.op_types == 1
    assert verification.diffs and all(d.max_abs == 0.0 for d in verification.diffs)
    text = verification.describe()
    assert "all 3 fused nodes" in text and "1 op types" in text and "graph optimizations off" in text


def test_the_fused_model_runs_only_as_far_as_the_nodes_it_checks(tmp_path, monkeypatch):
    """Of three fused nodes of one op type, the first is checked: the other two blocks are not run."""
    result = _result(tmp_path)
    ran: list[onnx.ModelProto] = []
    real = verify_module.run

    def spy(model_bytes, feeds, level, what):
        ran.append(onnx.load_model_from_string(model_bytes))
        return real(model_bytes, feeds, level, what)

    monkeypatch.setattr(verify_module, "run", spy)
    verification = verify_result(result)
    assert verification.equal and verification.diffs
    whole = onnx.inliner.inline_local_functions(onnx.load_model_from_string(result.model_bytes))
    fused_run = ran[0]
    assert 0 < len(fused_run.graph.node) < len(whole.graph.node)
    assert {node.name for node in fused_run.graph.node} <= {node.name for node in whole.graph.node}
    assert {info.name for info in fused_run.graph.input} == {"a0", "b0"}  # the other blocks' inputs are not read
    assert "as far as the first fused node of each op type" in verification.describe()


def test_swapped_inputs_of_a_call_fail_the_structure_check(tmp_path):
    def swap(model):
        call = [n for n in model.graph.node if n.domain == FUSED_DOMAIN][1]
        call.input[0], call.input[1] = call.input[1], call.input[0]

    with pytest.raises(HexfuseError, match="reads or writes"):
        verify_result(_tampered(_result(tmp_path), swap))


def test_a_changed_function_body_fails_the_structure_check(tmp_path):
    def edit(model):
        node = next(n for n in model.functions[0].node if n.op_type == "Softmax")
        node.attribute[0].i = 0

    with pytest.raises(HexfuseError, match="differs from its function's node"):
        verify_result(_tampered(_result(tmp_path), edit))


def test_a_dropped_unfused_node_fails_the_structure_check(tmp_path):
    model = builders.twin_blocks(((64, 64),) * 2)
    model.graph.node.extend([onnx.helper.make_node("Shape", ["a0"], ["r"], name="extra")])  # free: never fused
    model.graph.output.append(onnx.helper.make_tensor_value_info("r", onnx.TensorProto.INT64, [2]))
    result = fuse_model(builders.save(model, tmp_path / "m.onnx"), ANY_GAIN)

    def drop(model):
        keep = [n for n in model.graph.node if n.name != "extra"]
        del model.graph.node[:]
        model.graph.node.extend(keep)

    with pytest.raises(HexfuseError, match="nodes left unfused differ"):
        verify_result(_tampered(result, drop))


def test_numbers_catch_what_the_structure_check_would_miss(tmp_path, monkeypatch):
    monkeypatch.setattr(verify_module, "check_structure", lambda *args: None)

    def edit(model):
        node = next(n for n in model.functions[0].node if n.op_type == "Softmax")
        node.attribute[0].i = 0

    with pytest.raises(HexfuseError, match="differs from the original"):
        verify_result(_tampered(_result(tmp_path), edit))


def test_upgraded_models_are_also_compared_with_the_file():
    verification = verify_result(fuse_model(builders.light_model("squeezenet"), builders.unfolded_activation_scorer()))
    assert verification.equal and verification.against_file
    assert "the original file ran too" in verification.describe()


def test_the_command_writes_nothing_when_verification_fails(tmp_path, capsys, monkeypatch):
    def failing(result, seed=0):
        raise HexfuseError("fused model differs from the original on 'y0' (max rel error 1); nothing written")

    monkeypatch.setattr(outputs_module, "verify_result", failing)
    source = builders.save(builders.twin_blocks(((64, 64),) * 2), tmp_path / "in.onnx")
    assert main(["fuse", source, "-o", str(tmp_path / "out.onnx"), "--min-gain", "0", "--as-designed", "--allow-scalar"]) == 1
    assert "nothing written" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["in.onnx"]


def test_the_pass_checks_the_parts_the_rewrite_adds(tmp_path, monkeypatch):
    from hexfuse.graph_passes import pipeline

    rewrite = pipeline.rewrite_groups

    def broken(*args, **kwargs):
        model = rewrite(*args, **kwargs)
        model.functions[0].node[0].input[0] = "defined_nowhere"
        return model

    monkeypatch.setattr(pipeline, "rewrite_groups", broken)
    with pytest.raises(HexfuseError, match="fails onnx.checker"):
        _result(tmp_path)

"""BatchNormalization, constant scale/shift and activations after a matrix op join its unit where the target folds them."""

from __future__ import annotations

import pytest

from tests.passes import analyze_model
from hexfuse.graph_passes import pipeline
from hexfuse.graph_passes.cost import load_target
from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.cost.opcost import task_cost
from hexfuse.graph_passes.engines.classify import Engine
from hexfuse.graph_passes.rewrite.ort_check import compare_on_cpu
from hexfuse.graph_passes.spec.builder import fused_op_spec
from hexfuse.tools.synthetic import stacked_lm
from tests import builders

FOLDING = scorer_for("sm8550", 0.0, as_designed=True)
NOT_FOLDING = scorer_for(load_target("sm8550").with_values(folds=frozenset()), 0.0, as_designed=True)


def _unit_of(result, name: str) -> tuple[list[str], Engine]:
    analysis = result.analysis
    index = next(i for i in range(analysis.flat.node_count) if analysis.flat.node(i).name == name)
    unit = analysis.units.unit_of[index]
    return [analysis.flat.node(i).name for i in analysis.units.nodes[unit]], analysis.units.engine[unit]


def test_batch_norm_and_channel_scale_fold_into_the_conv(tmp_path):
    result = analyze_model(builders.save(builders.conv_bn_branches(), tmp_path / "m.onnx"), FOLDING)
    assert _unit_of(result, "conv") == (["conv", "bn", "scale", "relu"], Engine.MATRIX)
    assert _unit_of(result, "pool") == (["pool"], Engine.VECTOR)
    assert {"BatchNormalization", "Mul", "Add", "Relu", "Clip"} <= result.analysis.folds


def test_nothing_folds_where_the_target_does_not_fold(tmp_path):
    result = analyze_model(builders.save(builders.conv_bn_branches(), tmp_path / "m.onnx"), NOT_FOLDING)
    assert _unit_of(result, "conv") == (["conv"], Engine.MATRIX)
    assert _unit_of(result, "bn") == (["bn"], Engine.VECTOR)


@pytest.mark.parametrize("model, conv_unit", [
    (builders.conv_bn_branches(bn_users=2), ["conv"]),  # the Conv output has a second reader: nothing folds
    (builders.conv_bn_branches(per_channel=False), ["conv", "bn"]),  # a constant varying over space is no bias
])
def test_an_epilogue_folds_only_when_folding_is_exact(tmp_path, model, conv_unit):
    result = analyze_model(builders.save(model, tmp_path / "m.onnx"), FOLDING)
    assert _unit_of(result, "conv")[0] == conv_unit


def test_a_matmul_of_two_activations_takes_no_epilogue(tmp_path):
    result = analyze_model(builders.save(stacked_lm(1), tmp_path / "lm.onnx"), FOLDING)
    assert _unit_of(result, "l0_scores")[0] == ["l0_scores"]  # attention scores: no weights to fold into
    assert _unit_of(result, "l0_scaled")[1] is Engine.VECTOR


def test_folded_models_fuse_and_compute_the_original(tmp_path):
    path = builders.save(builders.conv_bn_branches(), tmp_path / "m.onnx")
    result = pipeline.fuse_model(path, FOLDING, None)  # no backend limit: op_package/qnn_ops.py has no Relu yet
    assert result.changed
    tasks = [t for op in result.spec.fused_ops for t in op.tasks if t.engine == "matrix"]
    assert tasks and {n.op_type for n in tasks[0].nodes} == {"Conv", "BatchNormalization", "Mul", "Relu"}
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


def test_folded_epilogues_cost_nothing(tmp_path):
    result = analyze_model(builders.save(builders.conv_bn_branches(), tmp_path / "m.onnx"), FOLDING)
    analysis = result.analysis
    matrix = next(t for t in analysis.tasks if t.engine is Engine.MATRIX)
    op = fused_op_spec(analysis, (matrix,))
    target = load_target("sm8550")
    folded = task_cost(op.tasks[0], op, target)
    unfolded = task_cost(op.tasks[0], op, target.with_values(folds=frozenset()))
    assert [c.op_type for c in folded.ops] == ["Conv"] and folded.dispatches == 1
    assert len(unfolded.ops) == 4 and unfolded.hvx_side_ns > folded.hvx_side_ns


@pytest.mark.parametrize("name", ["googlenet", "googlenet_qdq", "gptj_block", "llama_prefill_decode_qdq"])
def test_host_marks_are_the_matrix_ops_with_constant_weights(name):
    from pathlib import Path

    from hexfuse.graph_passes.analysis.units import _constant_nodes, engine_of
    from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS, FlatGraph
    from hexfuse.graph_passes.graph.folds import HOSTS, host_marks
    from hexfuse.graph_passes.load.model import load_model

    loaded = load_model(Path(__file__).resolve().parents[2] / "models" / f"{name}.onnx")
    flat = FlatGraph.build(loaded.model, loaded.inferred.graph)
    constant = _constant_nodes(flat, {op: engine_of(*op) for op in flat.op_table[0]})[1]
    expected = [op in HOSTS and flat.domains[i] in ONNX_DOMAINS and len(flat.inputs[i]) > 1
                and flat.inputs[i][1] >= 0 and bool(constant[flat.inputs[i][1]]) for i, op in enumerate(flat.op_types)]
    marks = host_marks(flat, constant).tolist()
    assert marks == expected and any(marks)

"""Structural checks of the pass on small graphs: what is fused, what is not, and why."""

from __future__ import annotations

import onnx
import pytest

from hexfuse.graph_passes.analysis.candidates import find_candidates, independence_problem
from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.engines.classify import Engine
from hexfuse.graph_passes.rewrite.ort_check import compare_on_cpu
from hexfuse.graph_passes.select.balance import BalanceScorer
from tests.passes import analyze_model, fuse_model
from hexfuse.graph_passes.graph.qdq import duplicate_shared_dequantize
from hexfuse.graph_passes.select.groups import select_groups
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN, FusionSpec
from tests import builders

ANY_GAIN = BalanceScorer(min_gain=0.0)  # structure tests: accept every independent pair


def _fused_types(model_bytes: bytes) -> list[str]:
    model = onnx.load_model_from_string(model_bytes)
    return [node.op_type for node in model.graph.node]


@pytest.mark.parametrize("size", [16, 64, 96])
def test_two_branches_become_one_fused_node(tmp_path, size):
    path = builders.save(builders.two_branch(size), tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    model = onnx.load_model_from_string(result.model_bytes)
    assert len(model.graph.node) == 1 and model.graph.node[0].domain == FUSED_DOMAIN
    (function,) = model.functions
    # tasks by first unit; units of one level by output name ("sm" < "y"), not by place in the file
    assert [n.name for n in function.node] == ["softmax", "scale", "matmul"]
    assert {t.engine for t in result.spec.fused_ops[0].tasks} == {"matrix", "vector"}
    assert [a.name for a in model.graph.node[0].attribute] == ["serial"]
    onnx.checker.check_model(model, full_check=True)
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


def test_fused_outputs_have_value_info_and_no_string_attributes(tmp_path):
    path = builders.save(builders.crossing_pairs(), tmp_path / "m.onnx")
    model = onnx.load_model_from_string(fuse_model(path, ANY_GAIN).model_bytes)
    typed = {info.name for info in (*model.graph.value_info, *model.graph.output)}
    for node in model.graph.node:
        if node.domain == FUSED_DOMAIN:
            assert set(node.output) <= typed
            assert all(a.type != onnx.AttributeProto.STRING for a in node.attribute)


def test_chain_has_nothing_to_fuse_and_says_why(tmp_path):
    path = builders.save(builders.chain(), tmp_path / "m.onnx")
    # the Relu left its own unit: with the target's activation fold it joins mm1, whose task then also
    # waits for a QNN translation of the Relu (tests/builders.py); the dependence reasons are under test
    result = fuse_model(path, builders.unfolded_activation_scorer())
    assert not result.changed and result.model_bytes == result.analyzed.loaded.raw
    reasons = result.analyzed.selection.reasons.values()
    assert reasons and all(" reaches " in reason for reason in reasons)
    folded = fuse_model(path)  # with the fold: still nothing, and the reasons say why
    assert not folded.changed and all(" reaches " in r or "the graph is a chain" in r or "no QNN translation" in r
                                      for r in folded.analyzed.selection.reasons.values())


def test_dependent_tasks_are_refused_with_named_path(tmp_path):
    analysis = Analysis.of(onnx.shape_inference.infer_shapes(builders.chain()))
    matmul = next(t for t in analysis.tasks if t.engine is Engine.MATRIX)
    relu = next(t for t in analysis.tasks if t.engine is Engine.VECTOR)
    assert independence_problem(analysis, matmul, relu) == "MatMul 'mm1' reaches Relu 'relu'"


def test_groups_that_would_close_a_cycle_are_not_both_fused(tmp_path):
    analysis = Analysis.of(onnx.shape_inference.infer_shapes(builders.crossing_pairs()))
    candidates = find_candidates(analysis)
    names = {frozenset(analysis.unit_label(t.units[0]) for t in (analysis.tasks[p.first], analysis.tasks[p.second])) for p in candidates.pairs}
    assert frozenset({"MatMul 'A'", "Sigmoid 'C'"}) in names and frozenset({"Relu 'B'", "MatMul 'D'"}) in names
    selection = select_groups(analysis, candidates, BalanceScorer(min_gain=0.0))
    chosen = [{analysis.unit_label(t.units[0]) for t in g.tasks} for g in selection.groups]
    # {A, C} and {B, D} can both be fused (A->B, C->D run forward); {A, D} with {B, C} could not.
    for group in chosen:
        assert group not in ({"MatMul 'A'", "MatMul 'D'"}, {"Relu 'B'", "Sigmoid 'C'"})


def test_cycle_closing_selection_is_repaired(tmp_path, monkeypatch):
    """Force the bad pairing {A, D} + {B, C}; the cycle check must drop one of them."""
    from hexfuse.graph_passes.analysis.candidates import Candidates, Pair
    from hexfuse.graph_passes.select import groups as select_module

    analysis = Analysis.of(onnx.shape_inference.infer_shapes(builders.crossing_pairs()))
    by_name = {analysis.unit_label(t.units[0]).split("'")[1]: t for t in analysis.tasks}
    a, b, c, d = (by_name[k] for k in "ABCD")
    forced = Candidates((Pair(a.id, d.id), Pair(b.id, c.id)), {a.id: (d.id,), d.id: (a.id,), b.id: (c.id,), c.id: (b.id,)}, {})
    selection = select_module.select_groups(analysis, forced, BalanceScorer(min_gain=0.0))
    assert len(selection.groups) == 1
    assert any("cycle" in reason for reason in selection.reasons.values())


def test_shared_dequantize_gets_one_consumer_each():
    model, made = duplicate_shared_dequantize(builders.qdq_two_branch())
    assert made == 1
    users: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1
    dq_outputs = [n.output[0] for n in model.graph.node if n.op_type == "DequantizeLinear"]
    assert all(users.get(name, 0) + (name in {o.name for o in model.graph.output}) == 1 for name in dq_outputs)
    onnx.checker.check_model(model, full_check=True)


def test_qdq_boundary_dq_and_q_stay_outside_the_fused_node(tmp_path):
    """DQ(x) -> MatMul -> Q becomes DQ -> [fused: MatMul] -> Q: the form the QNN EP claims, with the
    DQ/Q encodings recorded on the float ports (qdq_boundary.py)."""
    path = builders.save(builders.qdq_two_branch(), tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    assert result.changed
    (op,) = result.spec.fused_ops
    matrix = next(t for t in op.tasks if t.engine == "matrix")
    assert [n.op_type for n in matrix.nodes] == ["MatMul"]
    ports = {t.name: t for t in (*op.inputs, *op.outputs)}
    assert all(t.dtype == "float32" for t in ports.values())
    w = next(t for t in op.inputs if t.name.startswith("w_dq"))
    assert w.wire is not None and w.wire.dtype == "uint8" and w.wire.scale == (pytest.approx(0.01),)
    assert w.wire.zero_point == (128,)
    assert all(t.wire is not None and t.wire.scale == (pytest.approx(0.05),) for t in op.outputs)
    model = onnx.load_model_from_string(result.model_bytes)
    fused = next(n for n in model.graph.node if n.domain == "hexfuse")
    producers = {o: n for n in model.graph.node for o in n.output}
    assert {producers[i].op_type for i in fused.input} == {"DequantizeLinear"}
    consumers = [n.op_type for n in model.graph.node if set(n.input) & set(fused.output)]
    assert consumers == ["QuantizeLinear"] * len(fused.output)
    assert all(d.max_abs == 0.0 for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


def test_dynamic_shapes_are_never_fused(tmp_path):
    path = builders.save(builders.dynamic_two_branch(), tmp_path / "m.onnx")
    result = analyze_model(path)
    assert not result.fused_ops
    assert all(not unit.fusable for unit in result.analysis.units.units if unit.engine is not Engine.FREE)
    assert any("static shape" in (unit.blocker or "") for unit in result.analysis.units.units)


def test_spec_round_trips_through_json(tmp_path):
    path = builders.save(builders.qdq_two_branch(), tmp_path / "m.onnx")
    spec = fuse_model(path, ANY_GAIN).spec
    assert FusionSpec.from_json(spec.to_json()) == spec


def test_fusing_is_deterministic_and_idempotent(tmp_path):
    path = builders.save(builders.two_branch(), tmp_path / "m.onnx")
    first = fuse_model(path, ANY_GAIN)
    assert first.changed and fuse_model(path, ANY_GAIN).model_bytes == first.model_bytes
    fused_path = tmp_path / "fused.onnx"
    fused_path.write_bytes(first.model_bytes)
    again = fuse_model(fused_path, ANY_GAIN)
    assert not again.changed and again.model_bytes == first.model_bytes


def test_outputs_equal_for_random_inputs_on_several_seeds(tmp_path):
    path = builders.save(builders.crossing_pairs(), tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    assert result.changed
    for seed in range(3):
        assert all(d.max_abs == 0.0 for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes, seed))


def test_unbalanced_pair_is_rejected_by_the_balance_scorer(tmp_path):
    path = builders.save(builders.two_branch(8), tmp_path / "m.onnx")
    result = analyze_model(path, BalanceScorer(min_gain=0.3))
    assert not result.fused_ops
    assert any("unbalanced" in reason for reason in result.selection.reasons.values())

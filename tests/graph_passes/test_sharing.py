"""Groups identical up to renaming share one function and one op type; what a kernel may bake keeps them apart."""

from __future__ import annotations

import json

import onnx
import pytest

from tests.passes import fuse_model
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.rewrite.ort_check import compare_on_cpu
from hexfuse.graph_passes.select import groups as select_module
from hexfuse.graph_passes.select.balance import BalanceScorer
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN, SCHEMA_VERSION, FusionSpec
from hexfuse.tools.synthetic import stacked_lm
from tests import builders

ANY_GAIN = BalanceScorer(min_gain=0.0)


def _fused_nodes(model_bytes: bytes) -> tuple[onnx.ModelProto, list[onnx.NodeProto]]:
    model = onnx.load_model_from_string(model_bytes)
    return model, [n for n in model.graph.node if n.domain == FUSED_DOMAIN]


@pytest.mark.parametrize("blocks", [2, 3, 5])
def test_identical_groups_call_one_function(tmp_path, blocks):
    path = builders.save(builders.twin_blocks(((64, 64),) * blocks), tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    model, fused = _fused_nodes(result.model_bytes)
    assert len(fused) == blocks and len(model.functions) == 1 == len(result.spec.fused_ops)
    (op,) = result.spec.fused_ops
    assert {n.op_type for n in fused} == {op.op_type} and sorted(op.instances) == sorted(n.name for n in fused)
    assert op.node_name == op.instances[0]
    onnx.checker.check_model(model, full_check=True)
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


def test_another_shape_constant_gets_its_own_op_type(tmp_path):
    # same shapes and ops, but a kernel could bake the Reshape's shape values: they must not share
    path = builders.save(builders.twin_blocks(((64, 64), (-1, 64))), tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    model, fused = _fused_nodes(result.model_bytes)
    assert len(fused) == 2 and len(result.spec.fused_ops) == 2 == len(model.functions)
    assert all(len(op.instances) == 1 for op in result.spec.fused_ops)
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


def test_a_stacked_lm_needs_one_function_per_layer_structure(tmp_path):
    layers = 6
    path = builders.save(stacked_lm(layers), tmp_path / "lm.onnx")
    result = fuse_model(path)
    model, fused = _fused_nodes(result.model_bytes)
    per_layer = len(fused) // layers
    assert len(fused) == per_layer * layers and per_layer >= 2
    assert len(model.functions) == len(result.spec.fused_ops) <= per_layer + 1  # the first layer reads a graph input
    assert sum(len(op.instances) for op in result.spec.fused_ops) == len(fused)
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


def test_the_function_limit_counts_distinct_op_types(tmp_path, monkeypatch):
    monkeypatch.setattr(select_module, "MAX_FUSED_OPS", 1)
    path = builders.save(builders.twin_blocks(((64, 64), (64, 64), (-1, 64))), tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    assert len(result.spec.fused_ops) == 1 and len(result.analyzed.fused_nodes) == 2  # both instances kept
    reasons = result.analyzed.selection.reasons.values()
    assert any("distinct fused ops (ONNX's limit on local functions)" in r for r in reasons)


def test_spec_round_trips_with_instances_and_still_reads_schema_1(tmp_path):
    path = builders.save(builders.twin_blocks(((64, 64),) * 2), tmp_path / "m.onnx")
    spec = fuse_model(path, ANY_GAIN).spec
    assert spec.schema_version == SCHEMA_VERSION == 4
    assert FusionSpec.from_json(spec.to_json()) == spec
    raw = json.loads(spec.to_json())
    raw["schema_version"] = 1
    del raw["model_sha256"]  # schema 4
    for op in raw["fused_ops"]:
        del op["instances"]
    old = FusionSpec.from_json(json.dumps(raw))
    assert [op.instances for op in old.fused_ops] == [(op.node_name,) for op in spec.fused_ops]
    raw["schema_version"] = 5
    with pytest.raises(HexfuseError, match="schema_version 5 is not supported"):
        FusionSpec.from_json(json.dumps(raw))

"""The partition of nodes into units (analysis/units.py), computed as one stable sort of each node's owner,
against its definition: the nodes sharing an owner form a unit, units ordered by owner, nodes ascending."""

from __future__ import annotations

from pathlib import Path

import pytest

from hexfuse.graph_passes.analysis import units as units_module
from hexfuse.graph_passes.cost import load_target
from hexfuse.graph_passes.graph.flat import FlatGraph
from hexfuse.graph_passes.load.model import load_model

MODELS = Path(__file__).resolve().parents[2] / "models"
FOLDS = load_target("sm8550").folds  # BatchNormalization, scale/shift and activations join matrix units


def _by_owner(owner: list[int]) -> list[list[int]]:
    members: dict[int, list[int]] = {}
    for index, core in enumerate(owner):
        members.setdefault(core, []).append(index)
    return [members[core] for core in sorted(members)]


@pytest.mark.parametrize("name", ["googlenet", "googlenet_qdq", "gptj_block_qdq", "llama_prefill_decode_qdq"])
def test_units_are_the_nodes_sharing_an_owner(name):
    loaded = load_model(MODELS / f"{name}.onnx")
    flat = FlatGraph.build(loaded.model, loaded.inferred.graph)
    engines = {op: units_module.engine_of(*op) for op in flat.op_table[0]}
    constant = units_module._constant_nodes(flat, engines)[1]
    owner = units_module._owners(flat, FOLDS, constant)
    expected = _by_owner(owner)
    assert any(len(group) > 1 for group in expected)  # the models hold units of several nodes (folds, Q/DQ)
    ptr, members = units_module._group_nodes(flat, FOLDS, constant)
    assert [members[start:end].tolist() for start, end in zip(ptr[:-1], ptr[1:])] == expected
    graph = units_module.build_units(flat, folds=FOLDS)
    assert sorted(map(list, graph.nodes)) == sorted(expected)  # the same units, in rank order
    assert all(graph.unit_of[index] == unit for unit, nodes in enumerate(graph.nodes) for index in nodes)


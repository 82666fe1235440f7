"""The constant-folding marks of the flat graph (``FlatGraph.folds_to_constant``), computed in array steps,
against the walk in topological order that defines them; also past the array steps' bound."""

from __future__ import annotations

from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from hexfuse.graph_passes.graph import flat as flat_module
from hexfuse.graph_passes.graph.flat import FlatGraph
from hexfuse.graph_passes.load.model import load_model

MODELS = Path(__file__).resolve().parents[2] / "models"


def _walk(graph: FlatGraph) -> bytearray:
    marks = bytearray(graph.static)
    for index, op_type in enumerate(graph.op_types):
        if (graph.domains[index] in flat_module.ONNX_DOMAINS and op_type not in flat_module._NOT_FOLDED
                and all(t < 0 or marks[t] for t in graph.inputs[index])):
            for tensor in graph.outputs[index]:
                if tensor >= 0:
                    marks[tensor] = 1
    return marks


def _chain_model(length: int) -> onnx.ModelProto:
    """A chain of ``length`` Adds on a weight (folds), a random op (never folds) and its users, and a
    graph input's branch (never folds)."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    nodes = [helper.make_node("Add", ["w" if i == 0 else f"c{i - 1}", "w"], [f"c{i}"]) for i in range(length)]
    nodes += [helper.make_node("RandomNormal", [], ["r"], shape=[2]),
              helper.make_node("Add", ["r", f"c{length - 1}"], ["rc"]),
              helper.make_node("Add", ["x", f"c{length - 1}"], ["xc"]),
              helper.make_node("Add", ["xc", "rc"], ["y"])]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("length", [1, 5, flat_module.FOLD_STEPS + 7])
def test_array_steps_mark_what_the_walk_marks(length):
    graph = FlatGraph.build(_chain_model(length))
    marks = graph.folds_to_constant
    assert marks == _walk(graph)
    assert all(marks[graph.ids[f"c{i}"]] for i in range(length))
    assert not any(marks[graph.ids[name]] for name in ("r", "rc", "x", "xc", "y"))


@pytest.mark.parametrize("name", ["llama_prefill_decode_qdq", "googlenet_qdq", "moe_layer"])
def test_fold_marks_of_bundled_models(name):
    loaded = load_model(MODELS / f"{name}.onnx")
    graph = FlatGraph.build(loaded.model, typed=loaded.inferred.graph)
    assert graph.folds_to_constant == _walk(graph)

"""Every node of the model the pass edits maps back to the user's file: through the sort, the opset
upgrade and the DequantizeLinear copies."""

from __future__ import annotations

import onnx

from tests.passes import analyze_model
from hexfuse.graph_passes.select.balance import BalanceScorer
from hexfuse.graph_passes.select.names import NameScope
from tests import builders

ANY_GAIN = BalanceScorer(min_gain=0.0)


def test_an_unsorted_file_keeps_its_own_indices(tmp_path):
    model = builders.crossing_pairs()
    nodes = list(reversed(model.graph.node))
    for node in nodes:
        node.name = ""
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    result = analyze_model(builders.save(model, tmp_path / "m.onnx"), ANY_GAIN)
    labels = result.labels
    for index in range(result.analysis.flat.node_count):
        file_index = labels.file_index(index)
        assert model.graph.node[file_index].op_type == result.prepared.graph.node[index].op_type
        assert labels(index) == f"#{file_index} {model.graph.node[file_index].op_type}"
    assert labels.origin is not None and list(labels.origin) != list(range(len(nodes)))


def test_nodes_the_opset_upgrade_adds_are_labelled_as_such():
    path = builders.light_model("squeezenet")
    result = analyze_model(path, ANY_GAIN)
    file = onnx.load(path).graph
    added = [i for i in range(result.analysis.flat.node_count) if result.labels.file_index(i) < 0]
    assert added and all("added by the opset upgrade to 13" in result.labels(i) for i in added)
    kept = [i for i in range(result.analysis.flat.node_count) if result.labels.file_index(i) >= 0]
    assert len(kept) == len(file.node)
    assert all(file.node[result.labels.file_index(i)].op_type == result.prepared.graph.node[i].op_type
               or file.node[result.labels.file_index(i)].op_type in ("Upsample",) for i in kept)


def test_dequantize_copies_name_their_source(tmp_path):
    result = analyze_model(builders.save(builders.qdq_two_branch(), tmp_path / "m.onnx"), ANY_GAIN)
    copies = sorted(result.labels.copies)
    assert copies and all(result.labels(i) == "DequantizeLinear 'dq_in' (copy)" for i in copies)


def test_fresh_names_skip_taken_ones_in_order():
    model = builders.two_branch()
    model.graph.node[0].name = "a"
    model.graph.node[1].name = "a_1"
    model.graph.node[2].name = "a_3"
    scope = NameScope(model)
    assert [scope.fresh("a") for _ in range(3)] == ["a_2", "a_4", "a_5"]
    assert scope.fresh("b") == "b" and scope.fresh("b") == "b_1"

"""Outer-scope reads of subgraphs, and the op rule that spares reading the attributes of other nodes."""

from onnx import AttributeProto, TensorProto, defs, helper

from hexfuse.graph_passes.graph.subgraphs import may_hold_subgraph, node_reads


def test_every_standard_op_with_a_graph_attribute_may_hold_one():
    """The rule skips the attributes of every other standard op: no schema may define a graph attribute
    outside it (a newer onnx adding one fails here)."""
    graph_types = (AttributeProto.GRAPH, AttributeProto.GRAPHS)
    with_graphs = {schema.name for schema in defs.get_all_schemas_with_history() if schema.domain in ("", "ai.onnx")
                   and any(attribute.type in graph_types for attribute in schema.attributes.values())}
    assert with_graphs and all(may_hold_subgraph(op, "") for op in with_graphs)
    assert not may_hold_subgraph("Relu", "") and not may_hold_subgraph("MatMul", "ai.onnx")


def test_a_custom_op_with_a_subgraph_reads_the_outer_scope():
    body = helper.make_graph([helper.make_node("Relu", ["outer"], ["y"])], "body", [],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    custom = helper.make_node("Branch", ["x"], ["out"], domain="custom.ops", body=body)
    assert may_hold_subgraph("Branch", "custom.ops")
    assert node_reads(custom) == ["x", "outer"]
    plain = helper.make_node("Relu", ["x"], ["r"])
    assert node_reads(plain) == ["x"]

"""Give every DequantizeLinear exactly one consumer.

Why (DESIGN.md section 3): when a model holds a local function, ONNX Runtime asks the QNN EP for
capabilities during early function inlining, before its own pass that duplicates shared DQs; a DQ
feeding several nodes anywhere in the model then aborts the whole process. It also makes QDQ units
(DQ -> op -> Q) well defined.

    DQ ──> A            DQ   ──> A
       └─> B    ==>     DQ_1 ──> B          (DQ_1 is a copy reading the same quantized tensor)

Consumers are counted per input edge: a Concat reading one DQ output twice gets two DQs.
"""

from __future__ import annotations

import onnx

from hexfuse.graph_passes.names import NameScope


def duplicate_shared_dequantize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` where each DQ output feeds one node; returns (model, copies made)."""
    graph = model.graph
    outputs = {info.name for info in graph.output}
    users: dict[str, list[tuple[int, int]]] = {}  # tensor -> (node index, input slot) edges
    for index, node in enumerate(graph.node):
        for slot, name in enumerate(node.input):
            users.setdefault(name, []).append((index, slot))
    shared = [
        node for node in graph.node
        if node.op_type == "DequantizeLinear" and node.domain in ("", "ai.onnx")
        and len(users.get(node.output[0], [])) + (node.output[0] in outputs) > 1
    ]
    if not shared:
        return model, 0
    result = onnx.ModelProto()
    result.CopyFrom(model)
    names = NameScope(result)
    nodes = list(result.graph.node)
    copies_after: dict[int, list[onnx.NodeProto]] = {}
    made = 0
    index_of = {id(node): i for i, node in enumerate(graph.node)}
    for dq in shared:
        consumers = users[dq.output[0]]
        keep_first = dq.output[0] not in outputs  # a graph output keeps the original DQ
        for user in consumers[1:] if keep_first else consumers:
            copy = onnx.NodeProto()
            copy.CopyFrom(dq)
            copy.name = names.fresh(f"{dq.name or 'DequantizeLinear'}_hexfuse_dup")
            copy.output[0] = names.fresh(f"{dq.output[0]}_hexfuse_dup")
            node_index, slot = user
            nodes[node_index].input[slot] = copy.output[0]
            copies_after.setdefault(index_of[id(dq)], []).append(copy)
            made += 1
    del result.graph.node[:]
    for index, node in enumerate(nodes):
        result.graph.node.append(node)
        result.graph.node.extend(copies_after.get(index, []))
    return result, made

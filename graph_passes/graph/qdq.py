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

from dataclasses import dataclass, field

import onnx

from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS, FlatGraph
from hexfuse.graph_passes.select.names import NameScope


@dataclass(frozen=True)
class Duplicated:
    model: onnx.ModelProto  # the input model itself when nothing was shared
    made: int  # copies made
    sources: tuple[int, ...] | None = None  # node of ``model`` -> node of the input model; None: unchanged
    copies: frozenset[int] = frozenset()  # nodes of ``model`` that are copies
    aliases: dict[str, str] = field(default_factory=dict)  # copy's output -> the original DQ's output


def _edges(flat: FlatGraph, tensor: int) -> list[tuple[int, int]]:
    """Input edges reading ``tensor``; a subgraph's outer-scope read counts as an edge (slot -1: it
    cannot be rewired, so it keeps the original DQ)."""
    edges = []
    for user in flat.consumers[tensor]:
        own = flat.explicit.get(user, len(flat.inputs[user]))
        edges += [(user, slot if slot < own else -1) for slot, name in enumerate(flat.inputs[user]) if name == tensor]
    return edges


def dequantize_copies(model: onnx.ModelProto, flat: FlatGraph | None = None) -> Duplicated:
    """``model`` with each DQ output feeding one input edge; ``flat``: its flat graph, if built already."""
    flat = flat or FlatGraph.build(model)
    shared = []
    for index, op_type in enumerate(flat.op_types):
        if op_type == "DequantizeLinear" and flat.domains[index] in ONNX_DOMAINS:
            out = flat.outputs[index][0]
            if len(_edges(flat, out)) + (out in flat.graph_outputs) > 1:
                shared.append(index)
    if not shared:
        return Duplicated(model, 0)
    result = onnx.ModelProto()
    result.CopyFrom(model)
    names = NameScope(result)
    nodes = list(result.graph.node)
    copies_after: dict[int, list[onnx.NodeProto]] = {}
    aliases: dict[str, str] = {}
    for index in shared:
        dq = model.graph.node[index]
        out = flat.outputs[index][0]
        edges = _edges(flat, out)
        keep_first = out not in flat.graph_outputs  # a graph output keeps the original DQ
        kept = next((k for k, (_, slot) in enumerate(edges) if slot < 0), 0)  # an outer-scope read keeps it too
        rewired = [edge for k, edge in enumerate(edges) if edge[1] >= 0 and (k != kept or not keep_first)]
        for node_index, slot in rewired:
            copy = onnx.NodeProto()
            copy.CopyFrom(dq)
            copy.name = names.fresh(f"{dq.name or 'DequantizeLinear'}_hexfuse_dup")
            copy.output[0] = names.fresh(f"{dq.output[0]}_hexfuse_dup")
            nodes[node_index].input[slot] = copy.output[0]
            copies_after.setdefault(index, []).append(copy)
            aliases[copy.output[0]] = dq.output[0]
    del result.graph.node[:]
    sources: list[int] = []
    copies: set[int] = set()
    for index, node in enumerate(nodes):
        result.graph.node.append(node)
        sources.append(index)
        for copy in copies_after.get(index, []):
            result.graph.node.append(copy)
            copies.add(len(sources))
            sources.append(index)
    return Duplicated(result, len(copies), tuple(sources), frozenset(copies), aliases)


def duplicate_shared_dequantize(model: onnx.ModelProto) -> tuple[onnx.ModelProto, int]:
    """A copy of ``model`` where each DQ output feeds one node; returns (model, copies made)."""
    done = dequantize_copies(model)
    return done.model, done.made

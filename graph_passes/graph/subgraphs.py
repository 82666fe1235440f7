"""What a node with subgraphs (If, Loop, Scan) reads from the graph around it.

A subgraph may read any tensor of the enclosing scopes by name, without listing it as an input of
its node ("outer-scope reads"):

    x ──> Softmax ──> sm ──> ...
                      ┆
    cond ──> If ──> br          then-branch: Relu(sm)  ← reads sm, not an input of If
                                                     
To the dataflow (reachability, topological order, independence, which tensors leave a fused node)
such a read is an input edge of the node like any other: without it, a fused group could swallow
``sm`` or be ordered after the If.
"""

from __future__ import annotations

import onnx

_SUBGRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_GRAPH_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})  # the standard ops with a graph attribute


def may_hold_subgraph(op_type: str, domain: str) -> bool:
    """Whether a node of this op can have a graph attribute: a standard op with one in its schema, or
    any op of another domain (custom ops, model-local functions). The checker refuses a graph
    attribute anywhere else, and reading a node's attributes costs: ask this first."""
    return op_type in _GRAPH_OPS or domain not in ("", "ai.onnx")


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    graphs: list[onnx.GraphProto] = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def has_subgraph(node: onnx.NodeProto) -> bool:
    return any(attribute.type in _SUBGRAPH_TYPES for attribute in node.attribute)


def _free_names(graph: onnx.GraphProto, found: dict[str, None]) -> None:
    """Add to ``found`` the names ``graph`` (and the subgraphs inside it) reads but does not define."""
    defined = {info.name for info in graph.input}
    defined.update(init.name for init in graph.initializer)
    defined.update(init.values.name for init in graph.sparse_initializer)
    for node in graph.node:
        for name in node.input:
            if name and name not in defined:
                found[name] = None
        for inner in _subgraphs(node):
            nested: dict[str, None] = {}
            _free_names(inner, nested)
            found.update((name, None) for name in nested if name not in defined)
        defined.update(name for name in node.output if name)
    for info in graph.output:  # a subgraph output may name an outer tensor directly
        if info.name not in defined:
            found[info.name] = None


def local_names(node: onnx.NodeProto) -> set[str]:
    """Every tensor name the node's subgraphs (and theirs) define: their inputs, initializers and node
    outputs. ONNX scoping: such a name must not be defined in the graph around before the node."""
    names: set[str] = set()
    todo = _subgraphs(node)
    while todo:
        graph = todo.pop()
        names.update(info.name for info in graph.input)
        names.update(init.name for init in graph.initializer)
        for inner in graph.node:
            names.update(name for name in inner.output if name)
            todo.extend(_subgraphs(inner))
    return names


def outer_reads(node: onnx.NodeProto) -> tuple[str, ...]:
    """Tensors of the enclosing graph the node's subgraphs read, in first-read order, not already
    explicit inputs of the node; () for nodes without subgraphs."""
    if not has_subgraph(node):
        return ()
    found: dict[str, None] = {}
    for graph in _subgraphs(node):
        _free_names(graph, found)
    explicit = set(node.input)
    return tuple(name for name in found if name not in explicit)


def node_reads(node: onnx.NodeProto) -> list[str]:
    """Explicit inputs (with "" for omitted ones), then outer-scope reads."""
    if not may_hold_subgraph(node.op_type, node.domain):
        return list(node.input)
    return [*node.input, *outer_reads(node)]

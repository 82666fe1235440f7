"""Rewrite each chosen group into ONE node that calls a model-local ONNX function.

    x ──> MatMul ──> y          x ──┐                       ┌──> y
                          ==>       ├──> HexFuse_0_ab12cd ───┤
    z ──> Softmax ──> s         z ──┘   (domain "hexfuse")  └──> s

The function body is the original nodes, unchanged, so stock ONNX Runtime inlines it and computes
exactly the original; an op package registered for the op type claims the node on the QNN EP.
Encoding rules (DESIGN.md section 3): domain "hexfuse", op type unique per group, numeric attributes
only (``serial``), a value_info entry for every fused output.

Runtimes must see the original's semantics: functions need IR 8, and from IR 4 on ONNX Runtime treats an
initializer that is also listed in ``graph.input`` as an overridable input (no constant folding, no
prepacked weights: fused light models ran 1.17-1.53x slower on ORT CPU). IR 3 models list every
initializer as an input and mean constants, so those entries are dropped when the rewrite moves past IR 3.
"""

from __future__ import annotations

import onnx
from onnx import helper

from hexfuse.graph_passes.spec import FUSED_DOMAIN, SERIAL_ATTRIBUTE, FusedOp
from hexfuse.graph_passes.toposort import topological_order_of

MIN_IR_VERSION = 8  # model-local functions need IR version 8
OVERRIDABLE_INITIALIZERS_IR = 4  # from this IR on, an initializer listed as a graph input is overridable


def _function(op: FusedOp, body: list[onnx.NodeProto], opsets: list[onnx.OperatorSetIdProto]) -> onnx.FunctionProto:
    return helper.make_function(
        FUSED_DOMAIN, op.op_type,
        inputs=[tensor.name for tensor in op.inputs], outputs=[tensor.name for tensor in op.outputs],
        nodes=body, opset_imports=opsets, attributes=[SERIAL_ATTRIBUTE],
        doc_string=f"hexfuse {op.rule} fusion of {len(op.tasks)} tasks: " + ", ".join(t.engine for t in op.tasks),
    )


def rewrite_groups(
    model: onnx.ModelProto, inferred: onnx.GraphProto, groups: list[tuple[FusedOp, list[int]]]
) -> onnx.ModelProto:
    """A copy of ``model`` (nodes topologically sorted) with every group replaced by its fused node.

    ``groups`` pairs each fused op spec with the indices of its nodes in ``model.graph.node``;
    ``inferred`` is ``model``'s graph after shape inference, the source of value_info for fused outputs.
    """
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    opsets = [helper.make_opsetid(o.domain, o.version) for o in model.opset_import if o.domain != FUSED_DOMAIN]
    replaced: dict[int, int] = {}  # node index -> group number
    fused_nodes: list[onnx.NodeProto] = []
    hidden: set[str] = set()  # tensors now internal to a function
    for number, (op, indices) in enumerate(groups):
        body = [model.graph.node[i] for i in sorted(indices)]
        result.functions.append(_function(op, body, opsets))
        fused_nodes.append(helper.make_node(
            op.op_type, [t.name for t in op.inputs], [t.name for t in op.outputs], name=op.node_name,
            domain=FUSED_DOMAIN, **{SERIAL_ATTRIBUTE: 0},
        ))
        replaced.update({index: number for index in indices})
        outputs = {t.name for t in op.outputs}
        hidden.update(name for node in body for name in node.output if name and name not in outputs)
    nodes: list[onnx.NodeProto] = []
    emitted: set[int] = set()
    for index, node in enumerate(model.graph.node):
        number = replaced.get(index)
        if number is None:
            nodes.append(node)
        elif number not in emitted:
            emitted.add(number)
            nodes.append(fused_nodes[number])
    order = topological_order_of([list(n.input) for n in nodes], [list(n.output) for n in nodes])
    del graph.node[:]
    graph.node.extend(nodes[i] for i in order)
    kept_info = [info for info in graph.value_info if info.name not in hidden]
    del graph.value_info[:]
    graph.value_info.extend(kept_info)
    _add_output_value_info(graph, inferred, [op for op, _ in groups])
    if not any(o.domain == FUSED_DOMAIN for o in result.opset_import):
        result.opset_import.append(helper.make_opsetid(FUSED_DOMAIN, 1))
    result.ir_version = max(result.ir_version, MIN_IR_VERSION)
    if model.ir_version < OVERRIDABLE_INITIALIZERS_IR:
        _drop_initializer_inputs(graph)
    return result


def _drop_initializer_inputs(graph: onnx.GraphProto) -> None:
    """Keep constants constant past IR 3: an IR 3 graph input that names an initializer is a constant."""
    constants = {init.name for init in graph.initializer}
    kept = [info for info in graph.input if info.name not in constants]
    del graph.input[:]
    graph.input.extend(kept)


def written_changes(source: onnx.ModelProto, written: onnx.ModelProto, upgraded_from: int | None,
                    dq_copies: int = 0) -> tuple[str, ...]:
    """What a runtime sees differently in the written model besides the fused nodes, one line each.

    ``source`` is the model as the pass read it (after any opset upgrade, which keeps the IR version)."""
    out = []
    if upgraded_from is not None:
        new = next(o.version for o in written.opset_import if o.domain in ("", "ai.onnx"))
        out.append(f"default-domain opset {upgraded_from} -> {new}: the written model keeps the upgrade "
                   "(the fused functions hold the upgraded nodes)")
    if written.ir_version != source.ir_version:
        out.append(f"IR version {source.ir_version} -> {written.ir_version} "
                   f"(model-local functions need IR {MIN_IR_VERSION})")
    dropped = len(source.graph.input) - len(written.graph.input)
    if dropped > 0:
        out.append(f"{dropped} initializers no longer listed in graph.input: they were constants under IR "
                   f"{source.ir_version} and stay constants (listed, IR >= {OVERRIDABLE_INITIALIZERS_IR} would make "
                   "them overridable inputs and stop constant folding)")
    if dq_copies:
        out.append(f"{dq_copies} DequantizeLinear copies so every DequantizeLinear has one consumer "
                   "(QNN EP requirement)")
    return tuple(out)


def _add_output_value_info(graph: onnx.GraphProto, inferred: onnx.GraphProto, ops: list[FusedOp]) -> None:
    known = {info.name for info in (*graph.value_info, *graph.output, *graph.input)}
    source = {info.name: info for info in (*inferred.value_info, *inferred.output)}
    for op in ops:
        for tensor in op.outputs:
            if tensor.name not in known and tensor.name in source:
                graph.value_info.append(source[tensor.name])
                known.add(tensor.name)

"""The quantized boundary of a fused node, in the one form the QNN EP claims (DESIGN.md section 4).

The QNN EP hands a custom node to an op package only if every input comes from, and the first
consumer of every output is, a single-node unit. A fused node wired straight to the Q of an upstream
DQ->op->Q group fails that check and is silently inlined. So the DequantizeLinear nodes that read
from outside a task and the QuantizeLinear nodes whose results leave it stay *outside* the function:

    before                                      after
    ┌─ fused ──────────────────────┐
    │ DQ(x_q) ─> MatMul ─> Q ──────┼─> y_q       x_q ─> DQ ─> ┌─ fused ───────┐ ─> Q ─> y_q
    │ DQ(w_q) ─┘                   │             w_q ─> DQ ─> │ MatMul        │
    └──────────────────────────────┘                          └───────────────┘
                                                              float in, float out

ONNX Runtime computes the same thing either way (the function body is inlined between the same
DQ and Q). On the QNN EP those DQ/Q fold into the fused node's tensors: the kernel receives quantized
tensors carrying the DQ's / Q's scale and offset (``TensorSpec.wire``).

A Q whose result is also read inside its own task cannot leave (the task would read its own output
through the outside, a cycle); such a task keeps that Q and ``peel_blocker`` says why. A task whose
quantized tensors cannot all cross the boundary this way (a lone Q at a graph input, say) is never
fused: ``claim_blocker`` gives the reason the report prints.
"""

from __future__ import annotations

from typing import NamedTuple

from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS, FlatGraph

_DQ, _Q = "DequantizeLinear", "QuantizeLinear"


class Peeled(NamedTuple):
    body: tuple[int, ...]  # node indices left inside the function, in graph order
    dequantize: tuple[int, ...]  # boundary DQ nodes left outside (their outputs become fused inputs)
    quantize: tuple[int, ...]  # boundary Q nodes left outside (their inputs become fused outputs)


def _is(flat: FlatGraph, index: int, op_type: str) -> bool:
    return flat.op_types[index] == op_type and flat.domains[index] in ONNX_DOMAINS


def _q_readers(flat: FlatGraph, index: int, inside: set[int]) -> tuple[bool, bool]:
    """(read outside the task or a graph output, read inside) for the result of QuantizeLinear ``index``."""
    out = flat.outputs[index][0]
    users = flat.consumers[out]
    return out in flat.graph_outputs or any(u not in inside for u in users), any(u in inside for u in users)


def _produced(flat: FlatGraph, nodes) -> set[int]:
    return {t for i in nodes for t in flat.outputs[i] if t >= 0}


def peel(flat: FlatGraph, nodes: list[int]) -> Peeled:
    """Split a task's nodes into the function body and the boundary DQ/Q nodes that stay outside."""
    inside = set(nodes)
    produced = _produced(flat, nodes)
    dequantize = [i for i in nodes if _is(flat, i, _DQ) and flat.inputs[i][0] not in produced]
    quantize = []
    for index in nodes:
        if not _is(flat, index, _Q):
            continue
        leaves, read_inside = _q_readers(flat, index, inside)
        if leaves and not read_inside and flat.inputs[index][0] in produced:
            quantize.append(index)
    outside = set(dequantize) | set(quantize)
    body = tuple(i for i in nodes if i not in outside)
    if not body:  # a lone Q or DQ task: nothing would be left to fuse, keep it whole
        return Peeled(tuple(nodes), (), ())
    return Peeled(body, tuple(dequantize), tuple(quantize))


def _is_quantized_side(flat: FlatGraph, tensor: int) -> bool:
    """The integer side of a Q/DQ pair: produced by a QuantizeLinear or read by a DequantizeLinear."""
    producer = flat.producer[tensor]
    if producer >= 0 and _is(flat, producer, _Q):
        return True
    return any(_is(flat, user, _DQ) for user in flat.consumers[tensor])


def _node(flat: FlatGraph, index: int) -> str:
    return f"{flat.op_types[index]} {flat.node_names[index]!r}"


def claim_blocker(flat: FlatGraph, nodes: list[int], peeled: Peeled | None = None) -> str | None:
    """Why the QNN EP would not claim a fused node holding this task (it would be silently inlined), or None.

    The EP needs float ports: every quantized tensor must cross the boundary through a DQ or Q that
    stays outside (DESIGN.md section 4)."""
    blocked = peel_blocker(flat, nodes)
    if blocked is not None:
        return blocked
    peeled = peeled or peel(flat, nodes)  # (the caller may hold it already)
    body = set(peeled.body)
    produced = _produced(flat, peeled.body)
    for index in peeled.body:
        for tensor in flat.inputs[index]:
            if tensor >= 0 and tensor not in produced and not flat.static[tensor] and _is_quantized_side(flat, tensor):
                return (f"{_node(flat, index)} reads quantized {flat.names[tensor]!r} without a DequantizeLinear of "
                        "its own (the QNN EP claims fused nodes with float ports only)")
        for tensor in flat.outputs[index]:
            if tensor < 0:
                continue
            leaves = tensor in flat.graph_outputs or any(u not in body for u in flat.consumers[tensor])
            if leaves and _is_quantized_side(flat, tensor):
                return (f"{_node(flat, index)} hands quantized {flat.names[tensor]!r} out of the fused node "
                        "(the QNN EP claims fused nodes with float ports only)")
    return None


def peel_blocker(flat: FlatGraph, nodes: list[int]) -> str | None:
    """Why a task cannot take the claimable boundary form, or None."""
    inside = set(nodes)
    for index in nodes:
        if not _is(flat, index, _Q):
            continue
        leaves, read_inside = _q_readers(flat, index, inside)
        if leaves and read_inside:
            return (f"QuantizeLinear {flat.node_names[index]!r}: its result is read both inside and outside the task "
                    "(the QNN EP cannot claim a fused node with a quantized output)")
    return None

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

from dataclasses import dataclass

from hexfuse.graph_passes.dataflow import Dataflow

_DQ, _Q = "DequantizeLinear", "QuantizeLinear"


@dataclass(frozen=True)
class Peeled:
    body: tuple[int, ...]  # node indices left inside the function, in graph order
    dequantize: tuple[int, ...]  # boundary DQ nodes left outside (their outputs become fused inputs)
    quantize: tuple[int, ...]  # boundary Q nodes left outside (their inputs become fused outputs)


def _is(flow: Dataflow, index: int, op_type: str) -> bool:
    node = flow.nodes[index]
    return node.op_type == op_type and node.domain in ("", "ai.onnx")


def _q_readers(flow: Dataflow, index: int, inside: set[int]) -> tuple[bool, bool]:
    """(read outside the task or a graph output, read inside) for the result of QuantizeLinear ``index``."""
    out = flow.nodes[index].output[0]
    users = flow.consumers.get(out, [])
    return out in flow.graph_outputs or any(u not in inside for u in users), any(u in inside for u in users)


def peel(flow: Dataflow, nodes: list[int]) -> Peeled:
    """Split a task's nodes into the function body and the boundary DQ/Q nodes that stay outside."""
    inside = set(nodes)
    produced = {name for i in nodes for name in flow.nodes[i].output if name}
    dequantize = [i for i in nodes if _is(flow, i, _DQ) and flow.nodes[i].input[0] not in produced]
    quantize = []
    for index in nodes:
        if not _is(flow, index, _Q):
            continue
        leaves, read_inside = _q_readers(flow, index, inside)
        if leaves and not read_inside and flow.nodes[index].input[0] in produced:
            quantize.append(index)
    outside = set(dequantize) | set(quantize)
    body = tuple(i for i in nodes if i not in outside)
    if not body:  # a lone Q or DQ task: nothing would be left to fuse, keep it whole
        return Peeled(tuple(nodes), (), ())
    return Peeled(body, tuple(dequantize), tuple(quantize))


def _is_quantized_side(flow: Dataflow, name: str) -> bool:
    """The integer side of a Q/DQ pair: produced by a QuantizeLinear or read by a DequantizeLinear."""
    producer = flow.producer.get(name)
    if producer is not None and _is(flow, producer, _Q):
        return True
    return any(_is(flow, user, _DQ) for user in flow.consumers.get(name, ()))


def claim_blocker(flow: Dataflow, nodes: list[int], peeled: Peeled | None = None) -> str | None:
    """Why the QNN EP would not claim a fused node holding this task (it would be silently inlined), or None.

    The EP needs float ports: every quantized tensor must cross the boundary through a DQ or Q that
    stays outside (DESIGN.md section 4)."""
    blocked = peel_blocker(flow, nodes)
    if blocked is not None:
        return blocked
    peeled = peeled or peel(flow, nodes)  # (the caller may hold it already)
    body = set(peeled.body)
    produced = {name for i in peeled.body for name in flow.nodes[i].output if name}
    for index in peeled.body:
        node = flow.nodes[index]
        for name in node.input:
            if name and name not in produced and not flow.is_static(name) and _is_quantized_side(flow, name):
                return (f"{node.op_type} {node.name!r} reads quantized {name!r} without a DequantizeLinear of its own "
                        "(the QNN EP claims fused nodes with float ports only)")
        for name in node.output:
            users = flow.consumers.get(name, ())
            leaves = name in flow.graph_outputs or any(u not in body for u in users)
            if name and leaves and _is_quantized_side(flow, name):
                return (f"{node.op_type} {node.name!r} hands quantized {name!r} out of the fused node "
                        "(the QNN EP claims fused nodes with float ports only)")
    return None


def peel_blocker(flow: Dataflow, nodes: list[int]) -> str | None:
    """Why a task cannot take the claimable boundary form, or None."""
    inside = set(nodes)
    for index in nodes:
        if not _is(flow, index, _Q):
            continue
        leaves, read_inside = _q_readers(flow, index, inside)
        if leaves and read_inside:
            return (f"QuantizeLinear {flow.nodes[index].name!r}: its result is read both inside and outside the task "
                    "(the QNN EP cannot claim a fused node with a quantized output)")
    return None

"""Ports as codes: the boundary DQ / Q of a QDQ model's fused op brought inside the plan (opt-in).

On the QNN EP a fused op's float port that a DequantizeLinear feeds (or a QuantizeLinear reads) outside
the node arrives as its codes with the DQ's / Q's encoding (TensorSpec.wire); the port bridge (port.cpp)
then dequantizes it for the float plan and quantizes float outputs back. Most vector work of a QDQ model
touches such a port, so it never forms a DQ -> op -> Q unit inside a task. ``codes_at_ports`` moves that
conversion into the plan: each wire port becomes a codes port (the bridge aliases quantized integer wires),
read through a HexfuseQDequantize / written through a HexfuseQQuantize node of the task:

    port x (f32, wire u8) ─ Sigmoid ─► port y (f32, wire u8)
      =>  port x (u8) ─ QDequantize ─► x' ─ Sigmoid ─► y' ─ QQuantize ─► port y (u8)
      =>  (qdq_fusion)  port x (u8) ─ HexfuseQLookup ─► port y (u8)

The conversions are the bridge's own (qvector.h QConvertParams), so a port whose neighbour is not
rewritten gives the same bytes as before. The plan's port types change to the codes: only a caller that
runs the plan with wire tensors (the QNN glue, HostPackage.run_wire) may ask for this; the host ABI with
float ports stays the default.
"""

from __future__ import annotations

from dataclasses import replace

from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec, TaskSpec, TensorSpec
from hexfuse.op_package.lower.qdq_rewrites import NameSource
from hexfuse.op_package.lower.qvector_ops import PORT_CODES, QDEQUANTIZE, QQUANTIZE


def _as_codes(t: TensorSpec) -> TensorSpec | None:
    w = t.wire
    if w is None or t.dtype != "float32" or w.dtype not in PORT_CODES or len(w.scale) != 1 or len(w.zero_point) != 1:
        return None
    return replace(t, dtype=w.dtype, quant=w, wire=None)


def _rename(node: NodeSpec, names: dict[str, str]) -> NodeSpec:
    return replace(node, inputs=tuple(names.get(n, n) for n in node.inputs),
                   outputs=tuple(names.get(n, n) for n in node.outputs))


def _task(task: TaskSpec, codes: dict[str, TensorSpec], outputs: set[str], source: NameSource,
          temps: list[TensorSpec]) -> TaskSpec:
    read = [n for n in dict.fromkeys(i for node in task.nodes for i in node.inputs) if n in codes and n not in outputs]
    written = [n for n in dict.fromkeys(o for node in task.nodes for o in node.outputs) if n in codes]
    if not read and not written:
        return task
    names = {}
    for port in (*read, *written):
        names[port] = source.fresh(port)
        temps.append(TensorSpec(names[port], "float32", codes[port].shape))
    head = [NodeSpec(f"{p}/codes_in", QDEQUANTIZE, "", (p,), (names[p],)) for p in read]
    tail = [NodeSpec(f"{p}/codes_out", QQUANTIZE, "", (names[p],), (p,)) for p in written]
    return replace(task, nodes=(*head, *(_rename(n, names) for n in task.nodes), *tail))


def codes_at_ports(op: FusedOp) -> FusedOp:
    """The fused op with every wire-encoded float port as its codes, converted inside its tasks."""
    codes = {t.name: c for t in (*op.inputs, *op.outputs) if (c := _as_codes(t)) is not None}
    if not codes:
        return op
    outputs = {t.name for t in op.outputs}
    tensors = {t.name: t for t in (*op.inputs, *op.outputs, *op.tensors)}
    temps: list[TensorSpec] = []
    source = NameSource(tensors, temps)
    tasks = tuple(_task(task, codes, outputs, source, temps) for task in op.tasks)
    swap = [codes.get(t.name, t) for t in op.tensors]
    return replace(op, inputs=tuple(codes.get(t.name, t) for t in op.inputs),
                   outputs=tuple(codes.get(t.name, t) for t in op.outputs), tasks=tasks, tensors=(*swap, *temps))

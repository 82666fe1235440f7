"""Quantized kernel fusion: DequantizeLinear -> op -> QuantizeLinear units of a task become quantized kernels.

Inside a fused op of a QDQ model, a task holds chains such as

    a_q ─DQ─► a ─┐
                 Add ─► s ─Q─► s_q ─DQ─► s' ─ Sigmoid ─► t ─Q─► t_q
    b_q ─DQ─► b ─┘

which the op package would run node by node as float kernels (dequantize into a float buffer, the float
op, quantize back). ``fuse_qdq_units`` rewrites every unit whose encodings are static, per-tensor and
8-bit into one kernel on the codes (qdq_rewrites.py says which kernel per op type):

    a_q ─┐
         HexfuseQBinary ─► s_q ─ HexfuseQLookup ─► t_q
    b_q ─┘

A unit is: one op node, a DequantizeLinear in the same task producing each of its data inputs, and a
QuantizeLinear as the only reader of each of its outputs. The op and its Qs are replaced; a DQ goes too
unless another node still reads its float output. The new nodes take the op's place in the node order,
which stays topological: their inputs (the DQs' inputs) exist before the DQs and their outputs (the Qs'
outputs) are read only after the Qs. Everything else is left to the float kernels, with a reason per
unit that ``explain_qdq_units`` reports. Pure and idempotent: the same FusedOp gives the same result,
and a fused op passed again is returned as it is (its kernels form no unit).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, replace

from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec, QuantSpec, TaskSpec, TensorSpec
from hexfuse.op_package.lower import qdq_rewrites
from hexfuse.op_package.lower.qdq_ports import codes_at_ports
from hexfuse.op_package.lower.qvector_ops import QDEQUANTIZE, QQUANTIZE

log = logging.getLogger(__name__)
DEQUANTIZE = ("DequantizeLinear", QDEQUANTIZE)  # QDequantize / QQuantize: a port's codes (qdq_ports.py)
QUANTIZE = ("QuantizeLinear", QQUANTIZE)
QDQ = DEQUANTIZE + QUANTIZE


@dataclass(frozen=True)
class Unit:
    op: NodeSpec
    dqs: dict[int, NodeSpec]  # op input index -> the DQ producing it
    qs: tuple[NodeSpec, ...]  # per op output, its only reader


class _Task:
    """Producers and readers of one task's tensors; fused-op ports count as read from outside."""

    def __init__(self, task: TaskSpec, ports: set[str]):
        self.producer = {o: n for n in task.nodes for o in n.outputs if o}
        self.readers: dict[str, list[NodeSpec]] = defaultdict(list)
        for n in task.nodes:
            for name in n.inputs:
                if name:
                    self.readers[name].append(n)
        self.ports = ports

    def only_reader(self, name: str) -> NodeSpec | None:
        readers = self.readers.get(name, [])
        return readers[0] if len(readers) == 1 and name not in self.ports else None


def _encoding(tensor: TensorSpec, static: dict[str, bool], node: NodeSpec) -> QuantSpec | str:
    """The per-tensor encoding of a DQ input / Q output, or why the kernels cannot bake it in."""
    q = tensor.quant
    if q is None or len(q.scale) != 1 or len(q.zero_point) != 1:
        return f"tensor {tensor.name!r} has no per-tensor quantization parameters in the spec"
    if q.dtype != tensor.dtype:
        return f"tensor {tensor.name!r} is {tensor.dtype} but encoded as {q.dtype}"
    if not 0.0 < q.scale[0] < float("inf"):
        return f"tensor {tensor.name!r} has scale {q.scale[0]}"
    if not all(static.get(name, False) for name in node.inputs[1:3] if name):
        return f"the scale or zero point of {node.name!r} is not a static tensor"
    if int(node.attributes.get("block_size", 0)):  # type: ignore[call-overload]
        return f"{node.name!r} uses blocked quantization"
    if node.op_type == "QuantizeLinear" and int(node.attributes.get("saturate", 1)) != 1:  # type: ignore[call-overload]
        return f"{node.name!r} has saturate=0"
    return q


def _match(node: NodeSpec, graph: _Task, tensors: dict[str, TensorSpec]) -> Unit | str:
    data = qdq_rewrites.data_inputs(node)
    if data is None:
        return f"{node.op_type} has no quantized kernel"
    dqs = {}
    for i in data:
        source = graph.producer.get(node.inputs[i])
        if source is None or source.op_type not in DEQUANTIZE:
            return f"input {node.inputs[i]!r} is not dequantized inside the task"
        dqs[i] = source
    qs = []
    for name in node.outputs:
        reader = graph.only_reader(name) if name else None
        if reader is None or reader.op_type not in QUANTIZE:
            return f"output {name!r} is not read by exactly one QuantizeLinear"
        qs.append(reader)
    return Unit(node, dqs, tuple(qs))


def _encodings(unit: Unit, tensors: dict[str, TensorSpec]) -> tuple[dict[int, QuantSpec], list[QuantSpec]] | str:
    static = {name: t.static for name, t in tensors.items()}
    ins, outs = {}, []
    for key, node, name in [*((i, dq, dq.inputs[0]) for i, dq in unit.dqs.items()),
                            *((None, q, q.outputs[0]) for q in unit.qs)]:
        found = _encoding(tensors[name], static, node) if name in tensors else f"tensor {name!r} is not in the spec"
        if isinstance(found, str):
            return found
        if key is None:
            outs.append(found)
        else:
            ins[key] = found
    return ins, outs


def _build(node: NodeSpec, graph: _Task, tensors: dict[str, TensorSpec],
           names: qdq_rewrites.NameSource) -> tuple[Unit, qdq_rewrites.Built] | str:
    """Match, check and rewrite one node: its unit and kernels, or the reason it stays float."""
    if any(n and n not in tensors for n in (*node.inputs, *node.outputs)):
        return "a tensor of the node is not in the spec"  # the plan names it when it lowers the node
    unit = _match(node, graph, tensors)
    if isinstance(unit, str):
        return unit
    encodings = _encodings(unit, tensors)
    if isinstance(encodings, str):
        return encodings
    built = qdq_rewrites.rewrite(unit, *encodings, tensors, names)
    return built if isinstance(built, str) else (unit, built)


def _fuse_task(task: TaskSpec, tensors: dict[str, TensorSpec], ports: set[str],
               reasons: list[tuple[str, str]], units: list[Unit]) -> tuple[TaskSpec, list[TensorSpec]]:
    graph = _Task(task, ports)
    replaced: dict[str, list[NodeSpec]] = {}  # op name -> its kernels
    dropped: set[str] = set()
    dqs: list[NodeSpec] = []
    added: list[TensorSpec] = []
    for node in task.nodes:
        if node.op_type in QDQ:
            continue
        found = _build(node, graph, tensors, qdq_rewrites.NameSource(tensors, added))
        if isinstance(found, str):
            if any(graph.producer.get(i) is not None and graph.producer[i].op_type in DEQUANTIZE
                   for i in node.inputs if i):
                reasons.append((node.name, found))  # only units that looked quantized are worth a reason
                log.debug("qdq fusion: %s (%s) stays float: %s", node.name, node.op_type, found)
            continue
        unit, (nodes, new_tensors) = found
        units.append(unit)
        replaced[node.name] = nodes
        added.extend(new_tensors)
        dropped.update(q.name for q in unit.qs)
        dqs.extend(unit.dqs.values())
    if not replaced:
        return task, []
    for dq in dqs:  # a DQ goes once no remaining node reads its float output
        if dq.outputs[0] not in ports and all(r.name in replaced for r in graph.readers[dq.outputs[0]]):
            dropped.add(dq.name)
    nodes_out: list[NodeSpec] = []
    for node in task.nodes:
        if node.name in replaced:
            nodes_out.extend(replaced[node.name])
        elif node.name not in dropped:
            nodes_out.append(node)
    return replace(task, nodes=tuple(nodes_out)), added


def _run(op: FusedOp, wire_ports: bool) -> tuple[FusedOp, list[tuple[str, str]], list[Unit]]:
    if wire_ports:
        op = codes_at_ports(op)
    tensors = {t.name: t for t in (*op.inputs, *op.outputs, *op.tensors)}
    ports = {t.name for t in (*op.inputs, *op.outputs)}
    reasons: list[tuple[str, str]] = []
    units: list[Unit] = []
    tasks, added = [], []
    for task in op.tasks:
        fused, new_tensors = _fuse_task(task, tensors, ports, reasons, units)
        tasks.append(fused)
        added.extend(new_tensors)
        tensors.update((t.name, t) for t in new_tensors)
    if all(new is old for new, old in zip(tasks, op.tasks)):  # (op is the input op unless ports changed)
        return op, reasons, units
    return replace(op, tasks=tuple(tasks), tensors=op.tensors + tuple(added)), reasons, units


def fuse_qdq_units(op: FusedOp, wire_ports: bool = False) -> FusedOp:
    """The fused op with its quantizable DQ -> op -> Q units as quantized kernels (unchanged if none).

    wire_ports: read and write wire-encoded ports as their codes first (qdq_ports.py), so that units at
    the fused op's boundary fuse too; the plan's port types become the codes (for runs on wire tensors)."""
    return _run(op, wire_ports)[0]


def explain_qdq_units(op: FusedOp, wire_ports: bool = False) -> list[tuple[str, str]]:
    """(node name, reason) for every op that reads a dequantized tensor but stays on the float kernels."""
    return _run(op, wire_ports)[1]


def find_qdq_units(op: FusedOp, wire_ports: bool = False) -> list[Unit]:
    """The units ``fuse_qdq_units`` rewrites, in task and node order."""
    return _run(op, wire_ports)[2]

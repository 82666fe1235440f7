"""Rewrite each chosen group into ONE node that calls a model-local ONNX function.

    x ──> MatMul ──> y          x ──┐                       ┌──> y
                          ==>       ├──> HexFuse_0_ab12cd ───┤
    z ──> Softmax ──> s         z ──┘   (domain "hexfuse")  └──> s

The function body is the original nodes, unchanged, so stock ONNX Runtime inlines it and computes
exactly the original; an op package registered for the op type claims the node on the QNN EP.
Groups that are identical up to renaming (structure.py) call one function: its body is the first
such group's nodes, and every other call passes its own tensors in the same positions.
Encoding rules (DESIGN.md section 3): domain "hexfuse", op types never ONNX op names, numeric
attributes only (``serial``), a value_info entry for every fused output.

Runtimes must see the original's semantics: functions need IR 8, and from IR 4 on ONNX Runtime treats an
initializer that is also listed in ``graph.input`` as an overridable input (no constant folding, no
prepacked weights: fused light models ran 1.17-1.53x slower on ORT CPU). IR 3 models list every
initializer as an input and mean constants, so those entries are dropped when the rewrite moves past IR 3.
"""

from __future__ import annotations

import bisect
from collections.abc import MutableSequence, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np
import onnx
from onnx import helper

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.graph.dataflow import OVERRIDABLE_INITIALIZERS_IR
from hexfuse.graph_passes.graph.flat import FlatGraph
from hexfuse.graph_passes.graph.ports import ports
from hexfuse.graph_passes.spec.model import FUSED_DOMAIN, SERIAL_ATTRIBUTE, FusedOp

MIN_IR_VERSION = 8  # model-local functions need IR version 8


@dataclass(frozen=True)
class Call:
    """One fused node to write: the op type it calls and the nodes it replaces."""

    op: int  # index into the fused ops
    node_name: str
    nodes: tuple[int, ...]  # replaced node indices, in function-body order (task after task)
    inputs: tuple[int, ...]  # tensor ids, in the op's input order
    outputs: tuple[int, ...]  # tensor ids, in the op's output order


_SERIAL = helper.make_attribute(SERIAL_ATTRIBUTE, 0)


def fused_node(op: FusedOp, call: Call, names: Sequence[str]) -> onnx.NodeProto:
    """The node that calls ``op``'s function in place of ``call``'s nodes (``names``: tensor names by id)."""
    return onnx.NodeProto(op_type=op.op_type, domain=FUSED_DOMAIN, name=call.node_name, attribute=[_SERIAL],
                          input=[names[t] for t in call.inputs], output=[names[t] for t in call.outputs])


def _function(op: FusedOp, body: list[onnx.NodeProto], opsets: list[onnx.OperatorSetIdProto]) -> onnx.FunctionProto:
    return helper.make_function(
        FUSED_DOMAIN, op.op_type,
        inputs=[tensor.name for tensor in op.inputs], outputs=[tensor.name for tensor in op.outputs],
        nodes=body, opset_imports=opsets, attributes=[SERIAL_ATTRIBUTE],
        doc_string=f"hexfuse {op.rule} fusion of {len(op.tasks)} tasks: " + ", ".join(t.engine for t in op.tasks),
    )


def _slots(node_count: int, calls: Sequence[Call]) -> list[tuple[int, int]]:
    """The given node order with each call in place of its first member: (0, node) or (1, call)."""
    call_at = np.full(node_count, -1, dtype=np.int64)
    members = np.fromiter(chain.from_iterable(call.nodes for call in calls), dtype=np.int64)
    call_at[members] = len(calls)  # replaced
    call_at[[min(call.nodes) for call in calls]] = np.arange(len(calls), dtype=np.int64)
    kept = np.flatnonzero(call_at != len(calls))
    called = call_at[kept]
    is_call = called >= 0
    return list(zip(is_call.astype(np.int64).tolist(), np.where(is_call, called, kept).tolist()))


def _slot_arrays(slots: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """(kinds, indices) of the slots as arrays: kind 1 (a call) or 0 (an original node)."""
    pairs = np.fromiter(chain.from_iterable(slots), dtype=np.int64, count=2 * len(slots))
    return pairs[0::2], pairs[1::2]


def _order(flat: FlatGraph, slots: list[tuple[int, int]], calls: Sequence[Call]) -> list[int]:
    """A topological order of the new node list, staying as close to the given order as it can.

    ``slots`` lists (kind, index): kind 0 an original node, 1 a call. Nodes are taken in list order;
    one whose inputs are not all produced yet waits and is released the moment its last input is,
    so the order is linear to compute and deterministic. A cycle leaves nodes unreleased.
    While no slot waits, every slot up to the next one reading a tensor made at or after it is ready:
    those runs are taken at once."""
    table = _slot_ports(flat, slots, calls)
    if table.in_order:
        return list(range(len(slots)))
    count = len(slots)
    made_at = table.made_at.tolist()
    late = sorted(set(table.late_readers.tolist()))
    emitted = bytearray(count + 1)  # [count]: made by no slot (inside a fused node): never
    waiting: dict[int, list[int]] = {}
    missing: dict[int, int] = {}
    order: list[int] = []
    slot = 0
    while slot < count:
        if not waiting:  # nothing is held back: every slot before the next late reader is ready
            run_end = late[bisect.bisect_left(late, slot)] if late and late[-1] >= slot else count
            if run_end > slot:
                order.extend(range(slot, run_end))
                emitted[slot:run_end] = b"\x01" * (run_end - slot)
                slot = run_end
                continue
        kind, index = slots[slot]
        ins = calls[index].inputs if kind else flat.inputs[index]
        for tensor in ins:  # (most slots are ready: no set built for them)
            if tensor >= 0 and not emitted[made_at[tensor]] and made_at[tensor] >= 0:
                need = {t for t in ins if t >= 0 and made_at[t] >= 0 and not emitted[made_at[t]]}
                break
        else:
            need = None
        if need:
            missing[slot] = len(need)
            for tensor in need:
                waiting.setdefault(tensor, []).append(slot)
        else:
            stack = [slot]
            while stack:
                ready = stack.pop()
                order.append(ready)
                emitted[ready] = 1
                kind, index = slots[ready]
                for tensor in calls[index].outputs if kind else flat.outputs[index]:
                    for waiter in waiting.pop(tensor, ()):
                        missing[waiter] -= 1
                        if missing[waiter] == 0:
                            stack.append(waiter)
        slot += 1
    if len(order) != count:
        raise HexfuseError("internal error: fusing the chosen groups closes a cycle")
    return order


@dataclass(frozen=True)
class _SlotPorts:
    made_at: np.ndarray  # tensor -> the slot making it; -1 for graph inputs and initializers, len(slots) for none
    late_readers: np.ndarray  # slots reading a tensor made at or after them (or never)

    @property
    def in_order(self) -> bool:
        return not len(self.late_readers)


def _slot_ports(flat: FlatGraph, slots: list[tuple[int, int]], calls: Sequence[Call]) -> _SlotPorts:
    """Where each tensor is made and which slots read one made later, for all slots at once: usually
    none (the slots are already in a topological order: a fused node takes the place of its first member)."""
    kinds, indices = _slot_arrays(slots)
    kinds = kinds.astype(bool)
    node_slots = np.flatnonzero(~kinds)
    table = ports(flat, np.arange(len(node_slots) + 1, dtype=np.int64), indices[node_slots])
    tensors, is_input, tensor_slots = table.tensors, table.is_input, node_slots[table.node]
    call_slots = np.flatnonzero(kinds)
    call_ins_ptr, call_ins = ragged.from_rows([calls[indices[s]].inputs for s in call_slots])
    call_outs_ptr, call_outs = ragged.from_rows([calls[indices[s]].outputs for s in call_slots])
    reads = np.concatenate([tensors[is_input], call_ins])
    readers = np.concatenate([tensor_slots[is_input], np.repeat(call_slots, np.diff(call_ins_ptr))])
    writes = np.concatenate([tensors[~is_input], call_outs])
    writers = np.concatenate([tensor_slots[~is_input], np.repeat(call_slots, np.diff(call_outs_ptr))])
    # graph inputs and initializers come before everything; a tensor no slot writes (inside a group), never
    made_at = np.where(np.array(flat.producer, dtype=np.int64) >= 0, len(slots), -1)
    made_at[writes[writes >= 0]] = writers[writes >= 0]
    read = reads >= 0
    return _SlotPorts(made_at, readers[read][made_at[reads[read]] >= readers[read]])


def _in_order(flat: FlatGraph, slots: list[tuple[int, int]], calls: Sequence[Call]) -> bool:
    """Whether the slots are already in a topological order, checked for all slots at once."""
    return _slot_ports(flat, slots, calls).in_order


def rewrite_groups(model: onnx.ModelProto, flat: FlatGraph, ops: Sequence[FusedOp], calls: Sequence[Call]) -> onnx.ModelProto:
    """A copy of ``model`` (nodes topologically sorted) with every call's nodes replaced by its fused node.

    ``flat`` is ``model``'s flat graph (its inferred types give the fused outputs their value_info);
    the first call of each op supplies that op's function body."""
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    names = flat.names
    opsets = [helper.make_opsetid(o.domain, o.version) for o in model.opset_import if o.domain != FUSED_DOMAIN]
    originals = flat.nodes if flat.model is model else list(model.graph.node)
    defined: set[int] = set()
    for call in calls:
        if call.op not in defined:  # the first call of an op type supplies its body
            defined.add(call.op)
            result.functions.append(_function(ops[call.op], [originals[i] for i in call.nodes], opsets))
    slots = _slots(flat.node_count, calls)
    fused = [fused_node(ops[call.op], call, names) for call in calls]
    order = _order(flat, slots, calls)
    if order == list(range(len(slots))):  # the usual case: each fused node in its first member's place
        _replace_in_place(graph.node, calls, fused)
    else:  # every node to write, originals first, then the fused nodes; the order picks from that pool
        kinds, indices = _slot_arrays(slots)
        picks = indices + kinds * flat.node_count  # a call's node sits after the originals
        nodes = list(map([*originals, *fused].__getitem__, picks[order].tolist()))
        del graph.node[:]
        graph.node.extend(nodes)
    visible = {t for call in calls for t in call.outputs}
    hidden = {names[t] for call in calls for i in call.nodes for t in flat.outputs[i] if t >= 0 and t not in visible}
    if graph.value_info and hidden:
        kept_info = [info for info in graph.value_info if info.name not in hidden]
        del graph.value_info[:]
        graph.value_info.extend(kept_info)
    _add_output_value_info(graph, flat, calls)
    if not any(o.domain == FUSED_DOMAIN for o in result.opset_import):
        result.opset_import.append(helper.make_opsetid(FUSED_DOMAIN, 1))
    if result.ir_version < OVERRIDABLE_INITIALIZERS_IR:
        _drop_initializer_inputs(graph)
    result.ir_version = max(result.ir_version, MIN_IR_VERSION)
    return result


def _replace_in_place(nodes: MutableSequence[onnx.NodeProto], calls: Sequence[Call], fused: Sequence[onnx.NodeProto]) -> None:
    """In a copy of the original node list: each call's node written over its first member, its other
    members deleted (last first, so the indices still to delete keep their place). Copying every kept
    node into a new list instead costs about three times a copy of the whole model."""
    replaced = []
    for call, node in zip(calls, fused):
        first = min(call.nodes)
        nodes[first].CopyFrom(node)
        replaced += [index for index in call.nodes if index != first]
    for index in sorted(replaced, reverse=True):
        del nodes[index]


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


def _add_output_value_info(graph: onnx.GraphProto, flat: FlatGraph, calls: Sequence[Call]) -> None:
    known = {info.name for info in (*graph.value_info, *graph.output, *graph.input)}
    added = []
    for call in calls:
        for tensor in call.outputs:
            name = flat.names[tensor]
            if name not in known and tensor in flat.type_source:
                added.append(flat.type_source[tensor])
                known.add(name)
    graph.value_info.extend(added)  # (one extend: appending copies message by message through Python)

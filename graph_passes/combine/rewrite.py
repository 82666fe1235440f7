"""The combined model: each chain's tuples become one native op on the rows of all requests.

    prefill/x ─┐                                                      ┌─> prefill/q ──> prefill attention
               ├─ Concat ─> RMSNorm ─> MatMul(Wq) ─> ... ─ Split ─────┤
    decode/x  ─┘   (once, where the chain starts)    (once per tensor └─> decode/q  ──> decode attention
                                                      leaving the chain)

Combined nodes read the first request's copy of each constant (equal bytes in every request) and write
tensors named ``hexfuse.combined/<first request's name>``; the Split gives back the requests' own tensor
names, so every node left per request and every graph output reads what it read before. Nodes are put
in a topological order that keeps the original order where it can (load/toposort.py).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hexfuse.graph_passes.combine.plan import Plan
from hexfuse.graph_passes.load.toposort import topological_order_of

PREFIX = "hexfuse.combined/"


class _Names:
    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.used = {t for node in graph.node for t in (*node.input, *node.output, node.name)}
        self.used |= {i.name for i in (*graph.input, *graph.output, *graph.initializer, *graph.value_info)}

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}_{k}"
        self.used.add(name)
        return name


def combine_model(plan: Plan, chains: list[int]) -> onnx.ModelProto:
    """The model with the given chains (indices into plan.chains) combined; the rest unchanged."""
    view = plan.view
    model = onnx.ModelProto()
    model.CopyFrom(view.model)
    graph = model.graph
    names = _Names(model)
    removed: set[int] = set()
    combined_of: dict[int, onnx.NodeProto] = {}  # first member -> its combined node
    extra: list[tuple[int, onnx.NodeProto]] = []  # (position hint, node) for Concat / Split nodes
    new_name: dict[str, str] = {}  # first request's tensor -> its combined tensor
    initializers: list[onnx.TensorProto] = []
    value_infos: list[onnx.ValueInfoProto] = []
    for index in chains:
        chain = plan.chains[index]
        first_member = min(plan.counterparts.tuples[t][0] for t in chain.tuples)
        entry_name: dict[tuple[str, ...], str] = {}
        for tensors in chain.entries:
            axis = plan.axis[tensors[0]]
            out = entry_name[tensors] = names.fresh(PREFIX + tensors[0])
            encoding = _entry_encoding(plan, chain.tuples, tensors[0])
            extra.extend((first_member, node) for node in _requantized(
                "Concat", list(tensors), [out], encoding, names, axis=axis))
            value_infos.append(_joined_info(view, tensors, axis, out))
        for number in chain.tuples:
            members = plan.counterparts.tuples[number]
            for tensor in view.nodes[members[0]].output:
                if tensor:
                    new_name[tensor] = names.fresh(PREFIX + tensor)
        for number in chain.tuples:
            members = plan.counterparts.tuples[number]
            first = view.nodes[members[0]]
            node = onnx.NodeProto()
            node.CopyFrom(first)
            node.name = names.fresh(PREFIX + (first.name or first.op_type))
            for slot, tensor in enumerate(first.input):
                joined = plan.constants.get((number, slot))
                if joined is not None:  # the requests' rows of a table or a Reshape target
                    node.input[slot] = names.fresh(PREFIX + tensor)
                    initializers.append(numpy_helper.from_array(joined, node.input[slot]))
                    continue
                if not tensor or tensor in view.constant:
                    continue
                per_request = tuple(view.nodes[m].input[slot] for m in members)
                node.input[slot] = new_name[tensor] if tensor in new_name else entry_name[per_request]
            for k, tensor in enumerate(first.output):
                if tensor:
                    node.output[k] = new_name[tensor]
                    value_infos.append(_joined_info(view, plan.tensors(tensor), plan.axis[tensor], new_name[tensor]))
            combined_of[members[0]] = node
            removed.update(members)
        for tensors in chain.exits:
            sizes = plan.rows(tensors[0])
            split = names.fresh(PREFIX + tensors[0] + ".rows")
            initializers.append(numpy_helper.from_array(np.array(sizes, dtype=np.int64), split))
            extra.extend((view.producer[tensors[0]], node) for node in _requantized(
                "Split", [new_name[tensors[0]], split], list(tensors), _exit_encoding(plan, tensors[0]), names,
                axis=plan.axis[tensors[0]]))
    nodes: list[tuple[int, onnx.NodeProto]] = []
    for index, node in enumerate(view.nodes):
        if index in combined_of:
            nodes.append((index, combined_of[index]))
        elif index not in removed:
            nodes.append((index, node))
    nodes.extend(extra)
    nodes.sort(key=lambda pair: pair[0])  # stable: a Concat before the chain's first node, a Split after its producer
    ordered = [node for _, node in nodes]
    # CycleError where tuples of two chains cross (one request's order against another's): the caller drops chains
    order = topological_order_of([list(n.input) for n in ordered], [list(n.output) for n in ordered])
    del graph.node[:]
    graph.node.extend(ordered[i] for i in order)
    graph.initializer.extend(initializers)
    read = {t for node in graph.node for t in node.input} | {o.name for o in graph.output}
    kept = [init for init in graph.initializer if init.name in read]  # other requests' copies of combined weights
    del graph.initializer[:]
    graph.initializer.extend(kept)
    graph.value_info.extend(value_infos)
    return model


def boundary_ops(plan: Plan, index: int) -> int:
    """Nodes the rewrite adds around chain ``index``: a Concat per entry and a Split per exit, each with a
    DequantizeLinear per input and a QuantizeLinear per output where the tensors are quantized."""
    chain, view = plan.chains[index], plan.view
    count = 0
    for tensors in chain.entries:
        count += 1 + (len(tensors) + 1 if _entry_encoding(plan, chain.tuples, tensors[0]) else 0)
    for tensors in chain.exits:
        count += 1 + (len(tensors) + 1 if _exit_encoding(plan, tensors[0]) else 0)
    return count


def _exit_encoding(plan: Plan, tensor: str) -> tuple[str, ...] | None:
    """The (scale, zero point) of the QuantizeLinear giving an exit, where one gives it; else None."""
    producer = plan.view.nodes[plan.view.producer[tensor]]
    return tuple(producer.input[1:3]) if producer.op_type == "QuantizeLinear" else None


def _entry_encoding(plan: Plan, tuples: list[int], tensor: str) -> tuple[str, ...] | None:
    """The (scale, zero point) the chain dequantizes an entry with, where every reader in the chain is
    a DequantizeLinear with one encoding (plan.py refused tuples whose encodings differ); else None."""
    view = plan.view
    readers = [view.nodes[r] for r, _ in view.readers.get(tensor, ())
               if plan.counterparts.tuple_of.get(r) in tuples]
    encodings = {tuple(view.constant.get(t) for t in node.input[1:3]) for node in readers}
    if readers and all(node.op_type == "DequantizeLinear" for node in readers) and len(encodings) == 1:
        return tuple(readers[0].input[1:3])
    return None


def _requantized(op: str, inputs: list[str], outputs: list[str], encoding: tuple[str, ...] | None, names: _Names,
                 **attributes) -> list[onnx.NodeProto]:
    """``op`` (Concat or Split) on quantized tensors as QNN runs it: DequantizeLinear on each input, the
    op in float, QuantizeLinear on each output, one encoding throughout (so the values pass unchanged)."""
    if encoding is None:
        return [helper.make_node(op, inputs, outputs, name=names.fresh(PREFIX + op.lower()), **attributes)]
    moved = len(inputs) if op == "Concat" else 1
    nodes, floats = [], []
    for tensor in inputs[:moved]:
        floats.append(names.fresh(PREFIX + tensor + ".float"))
        nodes.append(helper.make_node("DequantizeLinear", [tensor, *encoding], [floats[-1]],
                                      name=names.fresh(PREFIX + "dequantize")))
    results = [names.fresh(PREFIX + tensor + ".float") for tensor in outputs]
    nodes.append(helper.make_node(op, [*floats, *inputs[moved:]], results, name=names.fresh(PREFIX + op.lower()),
                                  **attributes))
    nodes.extend(helper.make_node("QuantizeLinear", [result, *encoding], [tensor], name=names.fresh(PREFIX + "quantize"))
                 for result, tensor in zip(results, outputs))
    return nodes


def _joined_info(view, tensors: tuple[str, ...], axis: int, name: str) -> onnx.ValueInfoProto:
    shape = list(view.shape(tensors[0]))
    shape[axis] = sum(view.shape(t)[axis] for t in tensors)
    return helper.make_tensor_value_info(name, view.elem_type(tensors[0]), shape)

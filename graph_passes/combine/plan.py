"""The combined chains: which counterpart tuples run as one op, on which row axis, and why others stay apart.

Tuples are taken in the first request's order. A tuple joins when

  - its constant inputs are equal in every request (activation encodings included: else the reason names
    the tensor and both encodings);
  - every activation input has a static shape, equal across requests but on one axis (the rows);
  - the op is row-wise on that axis (rows.py), and its outputs too differ only on the row axis it gives.

An activation input produced by a joined tuple keeps that tuple's row axis; one produced per request is
an *entry* (concatenated once, on the axis its shapes differ on, else the first axis the op accepts).
Joined tuples linked by the tensors they pass form a chain; each chain is priced (price.py) and combined
or not as a whole. Every node left per request carries a reason.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from hexfuse.graph_passes.combine.match import Counterparts, find_counterparts, is_encoding_slot
from hexfuse.graph_passes.combine.row_constants import TABLE_OPS, differing_slots, reshape_rows, row_table
from hexfuse.graph_passes.combine.rows import Context, output_axes, preferred_axes
from hexfuse.graph_passes.combine.view import SHARED, RequestView
from hexfuse.graph_passes.load.model import default_opset

MAX_AXIS_TRIALS = 64  # row-axis choices tried for a tuple with several fresh entries
ENCODINGS_DIFFER = "the requests quantize "  # how a reason about unequal encodings starts (the CLI counts them)


@dataclass
class Chain:
    tuples: list[int]  # counterpart tuples, in the first request's order
    entries: list[tuple[str, ...]]  # per-request tensors concatenated where the chain starts
    exits: list[tuple[str, ...]]  # per-request tensors split back where the chain ends
    weights: list[str]  # initializers its ops read (through constant computations too), once each
    weight_bytes: int


@dataclass
class Plan:
    view: RequestView
    counterparts: Counterparts
    axis: dict[str, int] = field(default_factory=dict)  # first request's tensor -> row axis of its combined form
    joined: list[int] = field(default_factory=list)  # tuples combined, in order
    chains: list[Chain] = field(default_factory=list)
    apart: dict[int, str] = field(default_factory=dict)  # node left per request -> why
    constants: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # (tuple, slot) -> the requests' rows joined
    entries: dict[str, tuple[str, ...]] = field(default_factory=dict)  # first request's entry tensor -> one per request

    def tensors(self, ref: str) -> tuple[str, ...]:
        """Per request, the tensors a combined tensor stands for (made in a chain, or an entry to one)."""
        return self.counterparts.tensors.get(ref) or self.entries[ref]

    def rows(self, ref: str) -> tuple[int, ...]:
        axis = self.axis[ref]
        return tuple(self.view.shape(t)[axis] for t in self.tensors(ref))


def _value_reader(view: RequestView):
    initializers = view.initializers
    constants = {node.output[0]: node for node in view.nodes if node.op_type == "Constant" and node.output}
    cache: dict[str, np.ndarray | None] = {}

    def value(tensor: str) -> np.ndarray | None:
        if tensor not in cache:
            if tensor in initializers:
                cache[tensor] = numpy_helper.to_array(initializers[tensor])
            elif tensor in constants and constants[tensor].attribute and constants[tensor].attribute[0].name == "value":
                cache[tensor] = numpy_helper.to_array(constants[tensor].attribute[0].t)
            else:
                cache[tensor] = None
        return cache[tensor]

    return value


def _differing_axes(shapes: list[tuple[int, ...] | None]) -> list[int] | None:
    """Axes on which the requests' shapes differ; None where a shape is unknown or ranks differ."""
    if any(s is None for s in shapes) or len({len(s) for s in shapes}) != 1:
        return None
    return [a for a in range(len(shapes[0])) if len({s[a] for s in shapes}) > 1]


def _encoding_text(view: RequestView, node: onnx.NodeProto, value) -> str:
    scale, zero = (value(node.input[i]) if len(node.input) > i and node.input[i] else None for i in (1, 2))
    fmt = lambda a: "?" if a is None else (f"{a.reshape(-1)[0]:.6g}" if a.size == 1 else f"[{a.size} values]")
    return f"{fmt(scale)}/{fmt(zero)}"


def _encodings_differ(view: RequestView, members: tuple[int, ...], value) -> str | None:
    first = view.nodes[members[0]]
    for slot, tensor in enumerate(first.input):
        if not tensor or tensor not in view.constant or not is_encoding_slot(first.op_type, slot):
            continue
        others = [view.nodes[m].input[slot] for m in members]
        if len({view.constant.get(t) for t in others}) > 1:
            quantized = first.output[0] if first.op_type == "QuantizeLinear" else first.input[0]
            encodings = " vs ".join(_encoding_text(view, view.nodes[m], value) for m in members)
            return (f"{ENCODINGS_DIFFER}{quantized!r} with different encodings (scale/zero point {encodings}); "
                    "calibrate them together, or pass --requantize")
    return None


def _weights_read(view: RequestView, node: onnx.NodeProto, memo: dict[str, frozenset[str]]) -> set[str]:
    """Initializers (of 2+ elements) a node reads directly or through constant computations."""
    found: set[str] = set()
    for tensor in node.input:
        if tensor and tensor in view.constant:
            found |= constant_sources(view, tensor, memo)
    return found


def constant_sources(view: RequestView, tensor: str, memo: dict[str, frozenset[str]]) -> frozenset[str]:
    if tensor not in memo:
        if tensor in view.weight_bytes:
            memo[tensor] = frozenset({tensor}) if np.prod(view.shape(tensor) or (1,)) >= 2 else frozenset()
        else:
            producer = view.producer.get(tensor)
            memo[tensor] = frozenset().union(*(
                constant_sources(view, t, memo) for t in view.nodes[producer].input if t)) \
                if producer is not None else frozenset()
    return memo[tensor]


class _Planner:
    def __init__(self, view: RequestView, counterparts: Counterparts) -> None:
        self.view, self.cp = view, counterparts
        self.plan = Plan(view, counterparts)
        self.value = _value_reader(view)
        self.opset = default_opset(view.model)
        self.entry_axis: dict[tuple[str, ...], int] = {}  # per-request tensors -> axis of their Concat
        self.made: set[str] = set()  # first request's tensors produced by joined tuples

    def run(self, forbidden: dict[int, str]) -> Plan:
        for number, members in enumerate(self.cp.tuples):
            reason = forbidden.get(number) or self._join(number, members)
            if reason is not None:
                for member in members:
                    self.plan.apart[member] = reason
        for index, request in enumerate(self.view.request_of):
            if request != SHARED and index not in self.cp.tuple_of:
                self.plan.apart[index] = self.cp.missing.get(
                    index, f"no node of request {self.view.names[0]} corresponds to it")
        self._chains()
        return self.plan

    def _tuple_inputs(self, members: tuple[int, ...]) -> list[tuple[str, ...] | None]:
        """Per input slot, the requests' activation tensors (None for constants and omitted inputs)."""
        first = self.view.nodes[members[0]]
        slots: list[tuple[str, ...] | None] = []
        for slot, tensor in enumerate(first.input):
            if not tensor or tensor in self.view.constant:
                slots.append(None)
            else:
                slots.append(tuple(self.view.nodes[m].input[slot] for m in members))
        return slots

    def _join(self, number: int, members: tuple[int, ...]) -> str | None:
        view = self.view
        first = view.nodes[members[0]]
        reason = _encodings_differ(view, members, self.value)
        if reason is not None:
            return reason
        differing = differing_slots(view, members)
        if isinstance(differing, str):
            return differing
        if differing and not (first.op_type in TABLE_OPS or (first.op_type == "Reshape" and differing == [1])):
            return f"its constant input {first.input[differing[0]]!r} differs between the requests"
        inputs = self._tuple_inputs(members)
        choices: list[list[int | None]] = []
        for tensors in inputs:
            if tensors is None:
                choices.append([None])
                continue
            shapes = [view.shape(t) for t in tensors]
            differ = _differing_axes(shapes)
            if differ is None:
                return "an input's shape is not static, or its rank differs between the requests"
            known = self.plan.axis.get(tensors[0]) if tensors[0] in self.made else self.entry_axis.get(tensors)
            if len(differ) > 1:
                return f"its input {tensors[0]!r} differs between the requests on {len(differ)} axes " \
                       f"({' vs '.join(str(list(s)) for s in shapes)})"
            if known is not None:
                if differ and differ != [known]:
                    return f"its input {tensors[0]!r} has its rows on another axis"
                choices.append([known])
            else:
                choices.append(differ or preferred_axes(len(shapes[0])))
        outputs = [[view.shape(view.nodes[m].output[k]) for m in members] for k in range(len(first.output))]
        if any(s is None for shapes in outputs for s in shapes):
            return "an output's shape is not static"
        reason = "it reads no activation"
        # a differing constant is checked as a table of rows below; to the row rule it broadcasts
        shapes = [() if slot in differing else view.shape(t) for slot, t in enumerate(first.input)]
        for trial in itertools.islice(itertools.product(*choices), MAX_AXIS_TRIALS):
            tables: dict[int, np.ndarray] = {}
            if first.op_type == "Reshape" and trial[0] is not None:
                reshaped = reshape_rows(view, members, trial[0])
                found = [reshaped[0]] if not isinstance(reshaped, str) else reshaped
                if not isinstance(reshaped, str):
                    tables[1] = reshaped[1]  # always: a target of one request's rows is wrong for the sum
            else:
                found = output_axes(Context(first, shapes, [len(s[0]) for s in outputs], self.value, self.opset),
                                    list(trial))
                for slot in differing if not isinstance(found, str) else ():
                    table = row_table(view, members, slot, found[0], len(outputs[0][0]), self.value)
                    if isinstance(table, str):
                        found = table
                        break
                    tables[slot] = table
            if isinstance(found, str):
                reason = found
                continue
            bad = next((k for k, shapes in enumerate(outputs) if not set(_differing_axes(shapes) or []) <= {found[k]}),
                       None)
            if bad is not None:
                reason = f"its output {first.output[bad]!r} differs between the requests off the row axis"
                continue
            self._accept(number, members, inputs, list(trial), found)
            self.plan.constants.update({(number, slot): table for slot, table in tables.items()})
            return None
        return reason

    def _accept(self, number: int, members: tuple[int, ...], inputs, in_axes, out_axes) -> None:
        for tensors, axis in zip(inputs, in_axes):
            if tensors is not None and tensors[0] not in self.made:
                self.entry_axis.setdefault(tensors, axis)
        first = self.view.nodes[members[0]]
        for k, tensor in enumerate(first.output):
            if tensor:
                self.plan.axis[tensor] = out_axes[k]
                self.made.add(tensor)
        self.plan.joined.append(number)

    def _chains(self) -> None:
        """Joined tuples linked by combined tensors or shared entries: one chain each."""
        view, plan = self.view, self.plan
        joined = plan.joined
        parent = {t: t for t in joined}

        def find(t: int) -> int:
            while parent[t] != t:
                parent[t] = parent[parent[t]]
                t = parent[t]
            return t

        maker: dict[str, int] = {}
        entry_user: dict[tuple[str, ...], int] = {}
        for number in joined:
            first = view.nodes[self.cp.tuples[number][0]]
            for tensors in self._tuple_inputs(self.cp.tuples[number]):
                if tensors is None:
                    continue
                other = maker.get(tensors[0]) if tensors[0] in self.made else entry_user.setdefault(tensors, number)
                parent[find(number)] = find(other)
            for tensor in first.output:
                maker[tensor] = number
        groups: dict[int, list[int]] = {}
        for number in joined:
            groups.setdefault(find(number), []).append(number)
        memo: dict[str, frozenset[str]] = {}
        in_region = {m for t in joined for m in self.cp.tuples[t]}
        outputs = set(view.graph_outputs)
        for tuples in groups.values():
            entries: dict[tuple[str, ...], None] = {}
            exits: dict[tuple[str, ...], None] = {}
            weights: dict[str, None] = {}
            for number in tuples:
                members = self.cp.tuples[number]
                first = view.nodes[members[0]]
                for tensors in self._tuple_inputs(members):
                    if tensors is not None and tensors[0] not in self.made:
                        entries[tensors] = None
                weights.update(dict.fromkeys(sorted(_weights_read(view, first, memo))))
                for k, tensor in enumerate(first.output):
                    per_request = plan.tensors(tensor)
                    if any(t in outputs or any(r not in in_region for r, _ in view.readers.get(t, ()))
                           for t in per_request):
                        exits[per_request] = None
            for tensors in entries:
                plan.axis.setdefault(tensors[0], self.entry_axis[tensors])
                plan.entries.setdefault(tensors[0], tensors)
            plan.chains.append(Chain(tuples, list(entries), list(exits), list(weights),
                                     sum(view.weight_bytes[w] for w in weights)))


def _unit_cuts(plan: Plan) -> dict[int, str]:
    """Tuples whose chain would cut a DequantizeLinear -> op -> QuantizeLinear unit apart: QNN runs a
    quantized op only as that unit, so a chain starts and ends at quantized tensors, never inside one."""
    view, cut = plan.view, {}
    for chain in plan.chains:
        for tensors in chain.entries:
            producer = view.producer.get(tensors[0])
            if producer is None or view.nodes[producer].op_type not in ("QuantizeLinear", "DequantizeLinear"):
                # a float Concat before a QuantizeLinear is no QDQ unit: the chain starts after the requests' own Q
                label = "a graph input" if producer is None else \
                    f"the output of '{view.nodes[producer].name or view.nodes[producer].op_type}' kept per request"
                for reader, _ in view.readers.get(tensors[0], ()):
                    number = plan.counterparts.tuple_of.get(reader)
                    if number in chain.tuples and view.nodes[reader].op_type == "QuantizeLinear":
                        cut[number] = f"it quantizes {tensors[0]!r}, {label}: the chain starts at its quantized form"
            if producer is not None and view.nodes[producer].op_type == "DequantizeLinear":
                for reader, _ in view.readers.get(tensors[0], ()):
                    number = plan.counterparts.tuple_of.get(reader)
                    if number in chain.tuples:
                        cut[number] = (f"its input {tensors[0]!r} is dequantized per request: "
                                       f"{plan.apart.get(producer, 'that DequantizeLinear is not combined')}")
        for tensors in chain.exits:
            number = plan.counterparts.tuple_of[view.producer[tensors[0]]]
            if view.nodes[view.producer[tensors[0]]].op_type == "DequantizeLinear":
                cut[number] = f"its output {tensors[0]!r} is read by ops kept per request: a float tensor between " \
                              "a DequantizeLinear and its op"
            quantizers = [r for t in tensors for r, _ in view.readers.get(t, ())
                          if view.nodes[r].op_type == "QuantizeLinear" and r in plan.apart]
            if quantizers:
                cut[number] = f"its output {tensors[0]!r} is quantized per request: {plan.apart[quantizers[0]]}"
    return cut


def plan_combine(view: RequestView) -> Plan:
    """Counterparts, joined where row-wise, grown into chains; tuples that would cut a QDQ unit are
    refused and the rest planned again until no chain cuts one (each round refuses more: it ends)."""
    counterparts = find_counterparts(view)
    forbidden: dict[int, str] = {}
    while True:
        plan = _Planner(view, counterparts).run(forbidden)  # (reads the counterparts, never changes them)
        cuts = {n: r for n, r in _unit_cuts(plan).items() if n not in forbidden}
        if not cuts:
            return plan
        forbidden.update(cuts)

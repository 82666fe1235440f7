"""Counterpart nodes across requests: the same op on the same weights and on corresponding inputs.

Walking the first request's nodes in order, a node's counterpart in request r is the node of r that

  - has the same op type, domain and attributes;
  - reads, at every constant input slot, a constant of equal value (view.constant digests), and
  - reads, at every input slot whose tensor already has counterparts, the counterpart tensor in r.

Each such condition narrows the candidates; one left is the counterpart, none or several (an op applied
twice to one weight) leave the node without one. Weights anchor the walk where it re-enters a chain
(``o_proj`` after each request's own attention); corresponding inputs carry it along (RMSNorm, SiLU·Mul).

The encodings of activation Quantize/DequantizeLinear (inputs 1, 2) do not narrow: requests calibrated
apart still correspond there, and the plan says which tensor's encodings differ (or requantizes).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from hexfuse.graph_passes.combine.rows import ELEMENTWISE
from hexfuse.graph_passes.combine.view import SHARED, RequestView, attribute_key

QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})
ROW_CONSTANT_OPS = (ELEMENTWISE - QDQ) | {"Reshape"}  # their constants may differ by rows (row_constants.py)


@dataclass
class Counterparts:
    tuples: list[tuple[int, ...]] = field(default_factory=list)  # one node per request, request order
    tuple_of: dict[int, int] = field(default_factory=dict)  # node -> its tuple
    tensors: dict[str, tuple[str, ...]] = field(default_factory=dict)  # first request's tensor -> one per request
    missing: dict[int, str] = field(default_factory=dict)  # node without counterparts -> why


def is_encoding_slot(op_type: str, slot: int) -> bool:
    return op_type in QDQ and slot in (1, 2)


def node_key(view: RequestView, index: int) -> tuple:
    node = view.nodes[index]
    return (node.domain, node.op_type, attribute_key(node), len(node.input), len(node.output))


def find_counterparts(view: RequestView) -> Counterparts:
    found = Counterparts()
    if view.count < 2:
        return found
    by_constant: dict[tuple[bytes, int], list[int]] = {}
    for tensor, digest in view.constant.items():
        for reader, slot in view.readers.get(tensor, ()):
            if view.request_of[reader] != SHARED:
                by_constant.setdefault((digest, slot), []).append(reader)
    keys = [node_key(view, i) for i in range(len(view.nodes))]
    peers = functools.cache(lambda: _peer_groups(view, keys))  # built at the first tie, if one comes
    taken: set[int] = set()
    found.tensors.update(_corresponding_inputs(view))
    for index, node in enumerate(view.nodes):
        if view.request_of[index] != 0:
            continue
        members = [index]
        for request in range(1, view.count):
            candidates: set[int] | None = None
            for slot, tensor in enumerate(node.input):
                if not tensor or (is_encoding_slot(node.op_type, slot) and tensor in view.constant):
                    continue
                if tensor in view.constant:
                    narrowed = set(by_constant.get((view.constant[tensor], slot), ()))
                elif tensor in found.tensors:
                    twin = found.tensors[tensor][request]
                    narrowed = {reader for reader, at in view.readers.get(twin, ()) if at == slot}
                else:
                    continue
                candidates = narrowed if candidates is None else candidates & narrowed
            if candidates is None:
                found.missing[index] = "none of its inputs is a weight or has counterparts"
                break
            candidates = {c for c in candidates
                          if view.request_of[c] == request and keys[c] == keys[index] and c not in taken}
            if not candidates and node.op_type in ROW_CONSTANT_OPS:
                candidates = _by_activations(view, found, index, request, keys, taken)
            if len(candidates) > 1:
                candidates = _tiebreak(view, index, request, candidates, keys, peers())
            if len(candidates) != 1:
                found.missing[index] = _why_none(view, found, index, request, keys) if not candidates else \
                    f"request {view.names[request]} has {len(candidates)} nodes it could correspond to"
                break
            members.append(candidates.pop())
        else:
            _add(view, found, members, taken)
    _grow_quantizers_back(view, found, keys, taken)
    order = sorted(range(len(found.tuples)), key=lambda number: found.tuples[number][0])  # the sorted graph's order
    found.tuples = [found.tuples[number] for number in order]
    found.tuple_of = {member: number for number, members in enumerate(found.tuples) for member in members}
    return found


def _local_input_name(view: RequestView, name: str, request: int) -> str:
    """A graph input's name without its request's part (``prefill/x`` -> ``x``, ``decode_input_ids`` -> ``input_ids``)."""
    for prefix in (view.prefixes[request] if view.prefixes else "", view.names[request]):
        if prefix and name.startswith(prefix):
            return name[len(prefix):].lstrip("_/.:-")
    return name


def _corresponding_inputs(view: RequestView) -> dict[str, tuple[str, ...]]:
    """Graph inputs every request has under the same local name, type and rank: the requests' own ``x``
    (a chain may start at a graph input, not only at a weight)."""
    by_request: list[dict[str, str]] = [{} for _ in range(view.count)]
    for name in view.graph_inputs:
        request = view.requests_of_tensor(name)
        if request >= 0:
            by_request[request][_local_input_name(view, name, request)] = name
    found = {}
    for local, first in by_request[0].items():
        names = [inputs.get(local) for inputs in by_request]
        if any(n is None for n in names):
            continue
        shapes = [view.shape(n) for n in names]
        if len({view.elem_type(n) for n in names}) == 1 and None not in shapes and len({len(s) for s in shapes}) == 1:
            found[first] = tuple(names)
    return found


def _add(view: RequestView, found: Counterparts, members: list[int], taken: set[int]) -> None:
    number = len(found.tuples)
    found.tuples.append(tuple(members))
    for member in members:
        found.tuple_of[member] = number
        found.missing.pop(member, None)
        taken.add(member)
    for k, tensor in enumerate(view.nodes[members[0]].output):
        if tensor:
            found.tensors[tensor] = tuple(view.nodes[m].output[k] for m in members)


def _grow_quantizers_back(view: RequestView, found: Counterparts, keys: list[tuple], taken: set[int]) -> None:
    """Quantize/DequantizeLinear pairs that feed counterparts from nodes kept per request (the quantized
    attention output before ``o_proj``) correspond too: the forward walk cannot reach them (their data
    comes from a node without counterparts), but a chain may start at their quantized tensor."""
    pending = list(range(len(found.tuples)))
    while pending:
        members = found.tuples[pending.pop()]
        for slot, tensor in enumerate(view.nodes[members[0]].input):
            if not tensor or tensor in view.constant or tensor in found.tensors:
                continue
            producers = [view.producer.get(view.nodes[m].input[slot]) for m in members]
            if any(p is None or p in taken or view.request_of[p] == SHARED for p in producers):
                continue
            if view.nodes[producers[0]].op_type not in QDQ or len({keys[p] for p in producers}) != 1:
                continue
            _add(view, found, producers, taken)
            pending.append(len(found.tuples) - 1)


def _tiebreak(view: RequestView, index: int, request: int, candidates: set[int], keys: list[tuple],
              groups: dict[tuple, list[int]]) -> set[int]:
    """One of several candidates (a weight applied twice in a request): the one of the same name within its
    request, else the one at the same rank among the nodes of the same op on the same constants."""
    named = {c for c in candidates if view.local_name(c) == view.local_name(index)}
    if len(named) == 1:
        return named

    signature = _signature(view, keys, index)
    mine, theirs = groups[(signature, 0)], groups.get((signature, request), [])
    if len(mine) == len(theirs) and theirs[mine.index(index)] in candidates:
        return {theirs[mine.index(index)]}
    return candidates


def _signature(view: RequestView, keys: list[tuple], index: int) -> tuple:
    return keys[index], tuple(view.constant.get(t) for t in view.nodes[index].input)


def _peer_groups(view: RequestView, keys: list[tuple]) -> dict[tuple, list[int]]:
    """(op signature, request) -> its nodes in order."""
    groups: dict[tuple, list[int]] = {}
    for i, request in enumerate(view.request_of):
        if request != SHARED:
            groups.setdefault((_signature(view, keys, i), request), []).append(i)
    return groups


def _by_activations(view: RequestView, found: Counterparts, index: int, request: int, keys: list[tuple],
                    taken: set[int]) -> set[int]:
    """Nodes of ``request`` reading the counterparts of every activation ``index`` reads, whatever their
    constants (a Reshape into heads, RoPE's tables: they may differ by the request's rows; plan.py decides)."""
    node, candidates = view.nodes[index], None
    for slot, tensor in enumerate(node.input):
        if tensor in found.tensors:
            twin = found.tensors[tensor][request]
            narrowed = {reader for reader, at in view.readers.get(twin, ()) if at == slot}
            candidates = narrowed if candidates is None else candidates & narrowed
    return {c for c in candidates or () if keys[c] == keys[index] and c not in taken}


def _shown(view: RequestView, tensor: str) -> str:
    value = view.small_value(tensor)
    return f"{tensor!r} = {value}" if value is not None else repr(tensor)


def _why_none(view: RequestView, found: Counterparts, index: int, request: int, keys: list[tuple]) -> str:
    """Where the counterpart reads corresponding activations but another constant, name that constant
    (a Reshape's target shape holds the request's own token count)."""
    node = view.nodes[index]
    for slot, tensor in enumerate(node.input):
        if tensor in found.tensors:
            twin = found.tensors[tensor][request]
            for reader, at in view.readers.get(twin, ()):
                other = view.nodes[reader]
                if at != slot or keys[reader] != keys[index]:
                    continue
                for k, (mine, theirs) in enumerate(zip(node.input, other.input)):
                    if mine in view.constant and view.constant.get(theirs) != view.constant[mine]:
                        return (f"its constant input {k} differs between the requests ({_shown(view, mine)} vs "
                                f"{_shown(view, theirs)}): it works on the request's own sizes")
    return f"request {view.names[request]} has no node applying the same op to the same constants on corresponding inputs"

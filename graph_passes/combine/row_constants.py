"""Constants that differ between requests only by their rows: concatenated like the activations.

Two kinds (both how RoPE joins a chain: ``x -> Reshape(heads) -> Transpose -> x * cos + rotate(x) * sin``):

    a table       an elementwise op's constant whose extent on the output's row axis is the request's
                  row count (RoPE's cos/sin of the request's positions): the combined op reads the tables
                  concatenated on that axis;
    a Reshape     whose target shape differs only by the request's row count, at the position where the
                  input's row axis lands whole (the same leading size before it): the combined Reshape's
                  target holds the summed rows there.

    prefill: cos_p [128, 64] ─┐                            x [1, 32, 129, 64]
                              ├─ Concat (a new constant) ─ * ─
    decode:  cos_d [  1, 64] ─┘   [129, 64]
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from hexfuse.graph_passes.combine.match import is_encoding_slot
from hexfuse.graph_passes.combine.rows import ELEMENTWISE
from hexfuse.graph_passes.combine.view import RequestView

Value = Callable[[str], np.ndarray | None]
TABLE_OPS = ELEMENTWISE - {"QuantizeLinear", "DequantizeLinear"}


def differing_slots(view: RequestView, members: tuple[int, ...]) -> list[int] | str:
    """Input slots whose constants differ between the requests (encodings excluded: plan.py words
    those), or why the tuple cannot join (a slot constant in one request and computed in another)."""
    first = view.nodes[members[0]]
    slots = []
    for slot, tensor in enumerate(first.input):
        tensors = [view.nodes[m].input[slot] for m in members]
        constant = [bool(t) and t in view.constant for t in tensors]
        if len(set(constant)) > 1:
            return f"its input {slot} is a constant in one request and computed in another"
        if constant[0] and len({view.constant[t] for t in tensors}) > 1 and not is_encoding_slot(first.op_type, slot):
            slots.append(slot)
    return slots


def row_table(view: RequestView, members: tuple[int, ...], slot: int, out_axis: int, out_rank: int,
              value: Value) -> np.ndarray | str:
    """The requests' constants at ``slot`` concatenated on the output's row axis, or why they cannot be."""
    first = view.nodes[members[0]]
    tables = [value(view.nodes[m].input[slot]) for m in members]
    if any(t is None for t in tables):
        return f"its constant input {first.input[slot]!r} differs between the requests and is not an initializer"
    rank = tables[0].ndim
    position = out_axis - (out_rank - rank)
    rows = [view.shape(view.nodes[m].output[0])[out_axis] for m in members]
    if position < 0 or any(t.ndim != rank or t.shape[position] != r for t, r in zip(tables, rows)) or \
            len({t.shape[:position] + t.shape[position + 1:] for t in tables}) != 1:
        return f"its constant input {first.input[slot]!r} differs between the requests, not only by their rows"
    return np.concatenate(tables, axis=position)


def reshape_rows(view: RequestView, members: tuple[int, ...], in_axis: int) -> tuple[int, np.ndarray] | str:
    """(output row axis, combined target shape) of a Reshape that keeps the row axis whole, or why not."""
    common: set[int] | None = None
    for member in members:  # where the row axis lands whole, per request (size-1 dims leave several places)
        node = view.nodes[member]
        source, target = view.shape(node.input[0]), view.shape(node.output[0])
        if source is None or target is None:
            return "its shapes are not static"
        lead = math.prod(source[:in_axis])
        places = {p for p in range(len(target)) if math.prod(target[:p]) == lead and target[p] == source[in_axis]}
        common = places if common is None else common & places
    if not common:
        return "it reshapes the row axis itself"
    found = in_axis if in_axis in common else min(common)
    shapes = [view.shape(view.nodes[m].output[0]) for m in members]
    if len({s[:found] + s[found + 1:] for s in shapes}) != 1:
        return "its outputs differ between the requests off the row axis"
    combined = list(shapes[0])
    combined[found] = sum(s[found] for s in shapes)
    return found, np.array(combined, dtype=np.int64)

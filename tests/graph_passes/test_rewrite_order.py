"""The node order of a fused model (rewrite/groups.py ``_order``): the given order where it is already
topological (checked for all nodes at once), else the nearest topological one, else a clear error."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.flat import FlatGraph
from hexfuse.graph_passes.rewrite.groups import Call, _in_order, _order
from hexfuse.graph_passes.rewrite.groups import _slots as rewrite_slots
from tests.builders import bundled_or_lm


@pytest.fixture
def flat() -> FlatGraph:
    """node 0: m = MatMul(x, w); node 1: r = Relu(x); node 2: s = Sigmoid(r); node 3: y = Add(m, s)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Sigmoid", ["r"], ["s"]), helper.make_node("Add", ["m", "s"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 2])],
                              [numpy_helper.from_array(np.eye(2, dtype=np.float32), "w")])
    return FlatGraph.build(helper.make_model(graph))


def _slots(flat: FlatGraph, calls: list[Call]) -> list[tuple[int, int]]:
    first = {min(call.nodes): number for number, call in enumerate(calls)}
    members = {index for call in calls for index in call.nodes}
    return [(1, first[index]) if index in first else (0, index)
            for index in range(flat.node_count) if index not in members or index in first]


def test_an_order_that_is_already_topological_is_kept(flat):
    ids = flat.ids
    calls = [Call(0, "f", (0, 1), (ids["x"], ids["w"]), (ids["m"], ids["r"]))]
    slots = _slots(flat, calls)
    assert _in_order(flat, slots, calls)
    assert _order(flat, slots, calls) == [0, 1, 2]


def test_a_fused_node_waits_for_an_input_made_after_its_first_member(flat):
    ids = flat.ids
    calls = [Call(0, "f", (0, 2), (ids["x"], ids["w"], ids["r"]), (ids["m"], ids["s"]))]
    slots = _slots(flat, calls)  # [fused node, Relu, Add]: the fused node reads r, made by the Relu after it
    assert not _in_order(flat, slots, calls)
    assert [slots[i] for i in _order(flat, slots, calls)] == [(0, 1), (1, 0), (0, 3)]


def test_a_reader_of_a_tensor_hidden_inside_a_fused_node_is_an_error(flat):
    ids = flat.ids
    calls = [Call(0, "f", (1, 2), (ids["x"],), (ids["r"],))]  # s, read by the Add, is not an output
    slots = _slots(flat, calls)
    assert not _in_order(flat, slots, calls)
    with pytest.raises(HexfuseError, match="cycle"):
        _order(flat, slots, calls)


def _reference_order(flat: FlatGraph, slots: list[tuple[int, int]], calls: list[Call]) -> list[int]:
    """The order ``_order`` defines, walking every slot: taken in list order, a slot whose inputs are not
    all made yet waits and is released (last in, first out) the moment its last input is."""
    produced = bytearray(1 if source < 0 else 0 for source in flat.producer)
    ins = [calls[index].inputs if kind else flat.inputs[index] for kind, index in slots]
    outs = [calls[index].outputs if kind else flat.outputs[index] for kind, index in slots]
    waiting: dict[int, list[int]] = {}
    missing = [0] * len(slots)
    order: list[int] = []
    for slot in range(len(slots)):
        need = {t for t in ins[slot] if t >= 0 and not produced[t]}
        if need:
            missing[slot] = len(need)
            for tensor in need:
                waiting.setdefault(tensor, []).append(slot)
            continue
        stack = [slot]
        while stack:
            ready = stack.pop()
            order.append(ready)
            for tensor in outs[ready]:
                if tensor >= 0:
                    produced[tensor] = 1
                    for waiter in waiting.pop(tensor, ()):
                        missing[waiter] -= 1
                        if missing[waiter] == 0:
                            stack.append(waiter)
    return order


@pytest.mark.parametrize("source", ["lm", "gptj_block_qdq", "llama_prefill_decode_qdq", "googlenet_qdq"])
def test_runs_of_ready_slots_give_the_order_walking_every_slot_gives(tmp_path, source):
    from hexfuse.graph_passes import pipeline
    from hexfuse.graph_passes.cost.cli import scorer_for

    path = bundled_or_lm(tmp_path, source, layers=8)
    analyzed = pipeline.analyze_model(path, scorer_for("sm8650", -1e9, as_designed=True))  # every candidate the pass may fuse
    flat = analyzed.analysis.flat
    calls = [Call(n.op, n.node_name, n.nodes, n.inputs, n.outputs) for n in analyzed.fused_nodes]
    slots = _slots(flat, calls)
    assert rewrite_slots(flat.node_count, calls) == slots  # the rewrite's own slots, in array steps
    assert calls and _order(flat, slots, calls) == _reference_order(flat, slots, calls)
    if source == "lm":
        assert not _in_order(flat, slots, calls)  # the slots that wait are what is under test


def test_the_checked_new_parts_put_a_call_after_the_calls_it_reads():
    from hexfuse.graph_passes.pipeline import _called_first

    reader = Call(1, "b", (2, 9), (7,), (8,))  # starts first, but reads tensor 7, made by the call below
    maker = Call(0, "a", (5, 6), (1,), (7,))
    alone = Call(2, "c", (3, 4), (1,), (10,))
    assert [call.node_name for call in _called_first([reader, maker, alone])] == ["c", "a", "b"]

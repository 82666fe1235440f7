"""A fused output's encoding is the one the QNN EP folds: its first consumer's, if that is a Q
(issue 19, item 6: the EP's custom-op fusion looks at ``consumers[0]`` of each output only)."""

from __future__ import annotations

import onnx
from onnx import helper

from hexfuse.graph_passes.select.balance import BalanceScorer
from tests import builders
from tests.passes import fuse_model


def _sigmoid_read_by_abs(tmp_path, abs_first: bool) -> str:
    """qdq_two_branch with the sigmoid's float result also read by an Abs (a graph output), placed
    before or after the sigmoid's QuantizeLinear in node order (= consumer order)."""
    model = builders.qdq_two_branch()
    nodes = list(model.graph.node)
    at = next(k for k, n in enumerate(nodes) if n.name == "q_s") + (0 if abs_first else 1)
    nodes.insert(at, helper.make_node("Abs", ["s_f"], ["a"], name="abs"))
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    model.graph.output.append(builders.float_info("a", (32, 32)))
    onnx.checker.check_model(model)
    return builders.save(model, tmp_path / "m.onnx")


def _output_wires(path: str) -> dict:
    result = fuse_model(path, BalanceScorer(min_gain=0.0))
    assert result.changed
    (op,) = result.spec.fused_ops
    model = onnx.load_model_from_string(result.model_bytes)
    fused = next(n for n in model.graph.node if n.domain == "hexfuse")
    readers = [n.op_type for n in model.graph.node if "s_f" in n.input]
    assert "s_f" in fused.output and len(readers) == 2  # the two readers stay outside, in node order
    return {t.name: t.wire for t in op.outputs}


def test_a_float_reader_before_the_q_leaves_the_output_float(tmp_path):
    wires = _output_wires(_sigmoid_read_by_abs(tmp_path, abs_first=True))
    assert wires["s_f"] is None  # the EP sees Abs first: no Q folds, the port is handed over as float32
    assert wires["y_f"] is not None and wires["y_f"].dtype == "uint8"


def test_a_q_read_first_still_folds(tmp_path):
    wires = _output_wires(_sigmoid_read_by_abs(tmp_path, abs_first=False))
    assert wires["s_f"] is not None and wires["s_f"].dtype == "uint8" and wires["s_f"].zero_point == (128,)

"""A QDQ model whose fusable groups are chained through Q -> DQ (issue 19, item 6).

    x ─Q─DQ─┬─ MatMul(W1) ─Q─DQ─┬─ Sigmoid ─────Q─DQ─► b_sig      group A: MatMul ∥ Sigmoid
            └─ Sigmoid ─Q─DQ─┐  └─ Add ┐                         group B: MatMul ∥ Relu (or ∥ Add), each
                             ├─────────┴─Q─DQ─► r                fed by an output of group A through
                             ├─ MatMul(W2) ─Q─DQ─► b_mm          Q -> DQ; a tensor read twice gets one
                             └─ Relu ─────Q─DQ─► c               DQ copy per reader (the pass)

Built with onnx.helper (no torch): uint8 activations, int8 weights, per-tensor scales.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SEQ, DIM = 16, 64
INPUT = "x"


def _q_dq(nodes: list, inits: list, name: str, scale: float, zero: int) -> str:
    """``name`` -> QuantizeLinear -> DequantizeLinear; returns the float tensor after the DQ."""
    inits += [numpy_helper.from_array(np.array(scale, np.float32), f"{name}.s"),
              numpy_helper.from_array(np.array(zero, np.uint8), f"{name}.z")]
    nodes += [helper.make_node("QuantizeLinear", [name, f"{name}.s", f"{name}.z"], [f"{name}.q"], name=f"{name}/Q"),
              helper.make_node("DequantizeLinear", [f"{name}.q", f"{name}.s", f"{name}.z"], [f"{name}.dq"],
                               name=f"{name}/DQ")]
    return f"{name}.dq"


def _weight(nodes: list, inits: list, name: str, rng: np.random.Generator) -> str:
    codes = rng.integers(-100, 100, size=(DIM, DIM), dtype=np.int8)
    inits += [numpy_helper.from_array(codes, name), numpy_helper.from_array(np.array(0.004, np.float32), f"{name}.s"),
              numpy_helper.from_array(np.array(0, np.int8), f"{name}.z")]
    nodes.append(helper.make_node("DequantizeLinear", [name, f"{name}.s", f"{name}.z"], [f"{name}.dq"], name=f"{name}/DQ"))
    return f"{name}.dq"


def chained_qdq_model(seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    nodes: list = []
    inits: list = []
    x = _q_dq(nodes, inits, INPUT, 0.03, 128)
    w1, w2 = _weight(nodes, inits, "w1", rng), _weight(nodes, inits, "w2", rng)
    nodes += [helper.make_node("MatMul", [x, w1], ["a_mm"], name="a_mm"),
              helper.make_node("Sigmoid", [x], ["a_sig"], name="a_sig")]
    a_mm, a_sig = _q_dq(nodes, inits, "a_mm", 0.02, 128), _q_dq(nodes, inits, "a_sig", 1 / 255, 0)
    nodes += [helper.make_node("MatMul", [a_sig, w2], ["b_mm"], name="b_mm"),
              helper.make_node("Sigmoid", [a_mm], ["b_sig"], name="b_sig"),
              helper.make_node("Add", [a_sig, a_mm], ["r"], name="r"),
              helper.make_node("Relu", [a_sig], ["c"], name="c")]
    outputs = [_q_dq(nodes, inits, name, scale, zero)
               for name, scale, zero in (("b_mm", 0.01, 128), ("b_sig", 1 / 255, 0), ("r", 0.03, 128), ("c", 1 / 255, 0))]
    graph = helper.make_graph(
        nodes, "chained_qdq", [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [1, SEQ, DIM])],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, [1, SEQ, DIM]) for name in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model


def feeds(seed: int = 1) -> dict[str, np.ndarray]:
    return {INPUT: np.random.default_rng(seed).standard_normal((1, SEQ, DIM)).astype(np.float32)}

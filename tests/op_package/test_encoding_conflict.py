"""Codes written by a QuantizeLinear with one scale and read by a DequantizeLinear with another (legal
ONNX): the spec gave the tensor the last node's encoding and the QDQ fusion baked it into both sides,
so the unit before it quantized with the wrong scale (39 LSB off). Such a tensor now has no single
encoding: its Q and DQ stay float kernels, and the fused op computes what ORT computes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests import builders
from hexfuse.op_package.host import wire_form
from tests.op_package._harness import compare, prepare
from tests.op_package.test_numerics import mismatches


def _model() -> onnx.ModelProto:
    """MatMul beside Neg -> Q -> DQ -> Sigmoid -> Q(1/256) -> DQ(1/128) -> Tanh -> Q -> DQ -> Neg (uint8)."""
    rng = np.random.default_rng(0)

    def scalar(name: str, value, dtype) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(value, dtype), name)

    nodes = [helper.make_node("MatMul", ["mx", "mw"], ["my"], name="matmul"),
             helper.make_node("Neg", ["x"], ["n"], name="neg_in"),  # the Q/DQ chain sits inside the task
             helper.make_node("QuantizeLinear", ["n", "coarse", "zero"], ["n_q"], name="q_in"),
             helper.make_node("DequantizeLinear", ["n_q", "coarse", "zero"], ["n_d"], name="dq_in"),
             helper.make_node("Sigmoid", ["n_d"], ["s"], name="sigmoid"),  # a unit DQ -> Sigmoid -> Q(fine)
             helper.make_node("QuantizeLinear", ["s", "fine", "zero"], ["codes"], name="q_fine"),
             helper.make_node("DequantizeLinear", ["codes", "coarse", "zero"], ["d"], name="dq_coarse"),
             helper.make_node("Tanh", ["d"], ["t"], name="tanh"),
             helper.make_node("QuantizeLinear", ["t", "coarse", "zero"], ["t_q"], name="q_t"),
             helper.make_node("DequantizeLinear", ["t_q", "coarse", "zero"], ["t_d"], name="dq_t"),
             helper.make_node("Neg", ["t_d"], ["y"], name="neg_out")]
    inputs = [helper.make_tensor_value_info("mx", TensorProto.FLOAT, [64, 64]),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 8])]
    outputs = [helper.make_tensor_value_info("my", TensorProto.FLOAT, [64, 64]),
               helper.make_tensor_value_info("y", TensorProto.FLOAT, [8, 8])]
    initializers = [numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "mw"),
                    scalar("fine", 1 / 256, np.float32), scalar("coarse", 1 / 128, np.float32),
                    scalar("zero", 0, np.uint8)]
    return helper.make_model(helper.make_graph(nodes, "conflict", inputs, outputs, initializers),
                             opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_codes_with_two_encodings_keep_float_kernels(tmp_path: Path) -> None:
    source = Path(builders.save(_model(), tmp_path / "conflict.onnx"))
    case = prepare(source, tmp_path / "work")
    assert case is not None
    fused = [n.op_type for op in case.spec.fused_ops for task in op.tasks for n in task.nodes]
    assert "Sigmoid" in fused and "Tanh" in fused, fused  # the conflict is inside a fused op
    codes = [t for op in case.spec.fused_ops for t in op.tensors if t.name == "codes"]
    assert codes and all(t.quant is None for t in codes)
    failures = []
    for op in case.spec.fused_ops:  # both ways a runtime drives the op: float ports, and QNN's wire form
        inputs = [case.values[t.name] for t in op.inputs]
        outputs, _ = case.package.run(op.op_type, inputs, serial=False, trace=False)
        failures += [why for t, ours in zip(op.outputs, outputs) if (why := compare(t.name, ours, case.values[t.name]))]
        failures += mismatches(op, case.values, case.package.run_wire(op.op_type, inputs),
                               [wire_form(t, case.values[t.name])[0] for t in op.outputs])
    assert not failures, "\n".join(failures)

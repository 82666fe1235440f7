"""Small ONNX models built in code for the tests: one place, named by what they exercise."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def light_model(name: str) -> str:
    """Path of a Model Zoo 'light' model shipped in the onnx wheel, e.g. light_model('squeezenet')."""
    for stem in (f"light_{name}", f"light_bvlc_{name}"):
        path = os.path.join(LIGHT_DIR, f"{stem}.onnx")
        if os.path.exists(path):
            return path
    raise FileNotFoundError(name)


def _weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def _model(nodes, inputs, outputs, initializers=(), opset: int = OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def float_info(name: str, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape))


def two_branch(size: int = 64) -> onnx.ModelProto:
    """x -> MatMul(W) -> y   and   x -> Softmax -> Mul(2) -> s: one matrix and one vector branch."""
    rng = np.random.default_rng(0)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="matmul"),
        helper.make_node("Softmax", ["x"], ["sm"], name="softmax", axis=-1),
        helper.make_node("Mul", ["sm", "two"], ["s"], name="scale"),
    ]
    inits = [_weight(rng, "w", (size, size)), numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    return _model(nodes, [float_info("x", (size, size))], [float_info("y", (size, size)), float_info("s", (size, size))], inits)


def chain(size: int = 32) -> onnx.ModelProto:
    """x -> MatMul -> Relu -> MatMul -> Softmax: every op depends on the one before."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
        helper.make_node("Relu", ["a"], ["b"], name="relu"),
        helper.make_node("MatMul", ["b", "w2"], ["c"], name="mm2"),
        helper.make_node("Softmax", ["c"], ["y"], name="softmax"),
    ]
    inits = [_weight(rng, "w1", (size, size)), _weight(rng, "w2", (size, size))]
    return _model(nodes, [float_info("x", (size, size))], [float_info("y", (size, size))], inits)


def crossing_pairs(size: int = 16) -> onnx.ModelProto:
    """Two pairs that are each independent but, fused together, would close a cycle.

        x -> A(MatMul) -> B(Relu) -> ...      G1 = {A, D}, G2 = {B, C}
        x -> C(Sigmoid) -> D(MatMul)          A->B and C->D: contracting both makes G1->G2->G1
    """
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="A"),
        helper.make_node("Relu", ["a"], ["b"], name="B"),
        helper.make_node("Sigmoid", ["x"], ["c"], name="C"),
        helper.make_node("MatMul", ["c", "w2"], ["d"], name="D"),
    ]
    inits = [_weight(rng, "w1", (size, size)), _weight(rng, "w2", (size, size))]
    return _model(nodes, [float_info("x", (size, size))], [float_info("b", (size, size)), float_info("d", (size, size))], inits)


def with_cycle() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Relu", ["x", ], ["a"], name="r0"),
        helper.make_node("Add", ["a", "c"], ["b"], name="add"),
        helper.make_node("Relu", ["b"], ["c"], name="r1"),
    ]
    return _model(nodes, [float_info("x", (4,))], [float_info("c", (4,))])


def dynamic_two_branch() -> onnx.ModelProto:
    model = two_branch(8)
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    for output in model.graph.output:
        output.type.tensor_type.shape.dim[0].dim_param = "batch"
    return model


def qdq_two_branch(size: int = 32) -> onnx.ModelProto:
    """two_branch quantized in QDQ form with one DQ shared by both branches (the QNN-EP hazard)."""
    rng = np.random.default_rng(3)
    scale = numpy_helper.from_array(np.array(0.05, np.float32), "scale")
    zero = numpy_helper.from_array(np.array(128, np.uint8), "zero")
    w = numpy_helper.from_array(rng.integers(0, 255, (size, size)).astype(np.uint8), "w_q")
    wscale = numpy_helper.from_array(np.array(0.01, np.float32), "w_scale")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["x_q"], name="q_in"),
        helper.make_node("DequantizeLinear", ["x_q", "scale", "zero"], ["x_dq"], name="dq_in"),  # shared
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "zero"], ["w_dq"], name="dq_w"),
        helper.make_node("MatMul", ["x_dq", "w_dq"], ["y_f"], name="matmul"),
        helper.make_node("QuantizeLinear", ["y_f", "scale", "zero"], ["y_q"], name="q_y"),
        helper.make_node("DequantizeLinear", ["y_q", "scale", "zero"], ["y"], name="dq_y"),
        helper.make_node("Sigmoid", ["x_dq"], ["s_f"], name="sigmoid"),
        helper.make_node("QuantizeLinear", ["s_f", "scale", "zero"], ["s_q"], name="q_s"),
        helper.make_node("DequantizeLinear", ["s_q", "scale", "zero"], ["s"], name="dq_s"),
    ]
    return _model(nodes, [float_info("x", (size, size))], [float_info("y", (size, size)), float_info("s", (size, size))], [scale, zero, w, wscale])


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)

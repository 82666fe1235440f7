"""Small models for the micro-batch tests: row-independent ones that must split exactly, coupled ones
that must be refused with a reason. Named by what they exercise; built with tests/builders.py helpers."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.builders import _model, float_info


def _w(name: str, shape, seed: int = 0) -> onnx.TensorProto:
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _const(name: str, values, dtype=np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, dtype), name)


def token_mlp(tokens: int = 16, hidden: int = 32) -> onnx.ModelProto:
    """x[1,T,H] -> LayerNorm(features) -> MatMul -> Gelu-ish (Tanh) -> MatMul -> Softmax(features)."""
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["n"], name="norm", axis=-1),
        helper.make_node("MatMul", ["n", "w1"], ["h"], name="up"),
        helper.make_node("Tanh", ["h"], ["a"], name="act"),
        helper.make_node("MatMul", ["a", "w2"], ["d"], name="down"),
        helper.make_node("Softmax", ["d"], ["y"], name="softmax", axis=-1),
    ]
    inits = [_w("g", (hidden,), 1), _w("b", (hidden,), 2), _w("w1", (hidden, 4 * hidden), 3), _w("w2", (4 * hidden, hidden), 4)]
    return _model(nodes, [float_info("x", (1, tokens, hidden))], [float_info("y", (1, tokens, hidden))], inits)


def conv_batch(batch: int = 4) -> onnx.ModelProto:
    """A conv block over a batch of images: Conv -> inference BatchNorm -> Relu -> MaxPool -> Flatten -> Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "cw"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "s", "bb", "m", "v"], ["bn"], name="bn"),
        helper.make_node("Relu", ["bn"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], name="fc", transB=1),
    ]
    inits = [_w("cw", (8, 3, 3, 3), 1), _w("s", (8,), 2), _w("bb", (8,), 3), _w("m", (8,), 4),
             numpy_helper.from_array(np.abs(np.random.default_rng(5).standard_normal(8)).astype(np.float32) + 0.5, "v"),
             _w("fw", (10, 8 * 4 * 4), 6), _w("fb", (10,), 7)]
    return _model(nodes, [float_info("x", (batch, 3, 8, 8))], [float_info("y", (batch, 10))], inits)


def views_and_tables(tokens: int = 12) -> onnx.ModelProto:
    """Embedding lookup by split token ids, a per-token constant table (a RoPE-like Mul), Reshape that
    keeps the token axis, Transpose that moves it, Expand, Concat across features, ReduceMean over features."""
    nodes = [
        helper.make_node("Gather", ["emb", "ids"], ["e"], name="embed", axis=0),  # [1,T,16]
        helper.make_node("Mul", ["e", "table"], ["t"], name="rope_like"),  # table [T,16]
        helper.make_node("Reshape", ["t", "shape"], ["r"], name="heads"),  # [1,T,4,4]
        helper.make_node("Transpose", ["r"], ["tr"], name="to_heads", perm=[0, 2, 1, 3]),  # [1,4,T,4]
        helper.make_node("Unsqueeze", ["tr", "ax2"], ["u"], name="unsq"),  # [1,4,1,T,4]
        helper.make_node("Expand", ["u", "expand_to"], ["x2"], name="repeat_kv"),  # [1,4,2,T,4]
        helper.make_node("Concat", ["x2", "x2"], ["cat"], name="cat", axis=-1),  # [1,4,2,T,8]
        helper.make_node("ReduceMean", ["cat", "last"], ["y"], name="mean", keepdims=0),  # [1,4,2,T]
    ]
    rng = np.random.default_rng(3)
    inits = [_w("emb", (32, 16), 1), numpy_helper.from_array(rng.standard_normal((tokens, 16)).astype(np.float32), "table"),
             _const("shape", [1, tokens, 4, 4]), _const("ax2", [2]), _const("expand_to", [1, 4, 2, tokens, 4]),
             _const("last", [-1])]
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, [1, tokens])
    return _model(nodes, [ids], [float_info("y", (1, 4, 2, tokens))], inits, opset=18)


def reduce_over_tokens(tokens: int = 8) -> onnx.ModelProto:
    nodes = [helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum_tokens", keepdims=1)]
    return _model(nodes, [float_info("x", (1, tokens, 16))], [float_info("y", (1, 1, 16))], [_const("axes", [1])], opset=18)


def softmax_over_tokens(tokens: int = 8) -> onnx.ModelProto:
    nodes = [helper.make_node("Softmax", ["x"], ["y"], name="softmax_tokens", axis=1)]
    return _model(nodes, [float_info("x", (1, tokens, 16))], [float_info("y", (1, tokens, 16))], opset=18)


def attention(tokens: int = 8, width: int = 16) -> onnx.ModelProto:
    """Self-attention over tokens: Q K^T couples every token with every other."""
    nodes = [
        helper.make_node("MatMul", ["x", "wq"], ["q"], name="q_proj"),
        helper.make_node("MatMul", ["x", "wk"], ["k"], name="k_proj"),
        helper.make_node("Transpose", ["k"], ["kt"], name="k_t", perm=[0, 2, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["s"], name="scores"),
        helper.make_node("Softmax", ["s"], ["p"], name="probs", axis=-1),
        helper.make_node("MatMul", ["p", "x"], ["y"], name="mix"),
    ]
    return _model(nodes, [float_info("x", (1, tokens, width))], [float_info("y", (1, tokens, width))],
                  [_w("wq", (width, width), 1), _w("wk", (width, width), 2)])


def batchnorm_training(batch: int = 4) -> onnx.ModelProto:
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"], name="bn_train",
                              training_mode=1)]
    inits = [_w("s", (3,), 1), _w("b", (3,), 2), _w("m", (3,), 3), numpy_helper.from_array(np.ones(3, np.float32), "v")]
    outs = [float_info("y", (batch, 3, 4, 4)), float_info("rm", (3,)), float_info("rv", (3,))]
    return _model(nodes, [float_info("x", (batch, 3, 4, 4))], outs, inits, opset=15)


def reshape_folding_batch(batch: int = 4) -> onnx.ModelProto:
    """Reshape [B,8] -> [B*8]: the batch axis is folded into one axis with the features."""
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["r"], name="fold"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    return _model(nodes, [float_info("x", (batch, 8))], [float_info("y", (batch * 8,))], [_const("flat", [batch * 8])])


def two_inputs_split_together(tokens: int = 8) -> onnx.ModelProto:
    """Two inputs with the same token axis, added, then a per-token projection."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("MatMul", ["s", "w"], ["y"], name="proj")]
    return _model(nodes, [float_info("a", (1, tokens, 16)), float_info("b", (1, tokens, 16))],
                  [float_info("y", (1, tokens, 8))], [_w("w", (16, 8), 1)])


def input_also_output(tokens: int = 8) -> onnx.ModelProto:
    """The input is also a graph output (a pass-through): the split must leave it whole, not join it
    with a Concat that writes the input's own name (that read as a cycle)."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"), helper.make_node("Elu", ["a"], ["y"], name="elu")]
    return _model(nodes, [float_info("x", (1, tokens, 16))], [float_info("y", (1, tokens, 16)), float_info("x", (1, tokens, 16))],
                  [_w("w", (16, 16), 1)])


def one_constant_two_axes(size: int = 8) -> onnx.ModelProto:
    """One all-ones [8,8] constant added before a Transpose (split axis 0) and after it (axis 1): its
    [4,8] and [8,4] slices have the same bytes and must stay two initializers."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm"), helper.make_node("Add", ["a", "ones"], ["b"], name="add1"),
             helper.make_node("Transpose", ["b"], ["t"], perm=[1, 0], name="tr"),
             helper.make_node("Add", ["t", "ones"], ["y"], name="add2")]
    return _model(nodes, [float_info("x", (size, size))], [float_info("y", (size, size))],
                  [_w("w", (size, size), 1), numpy_helper.from_array(np.ones((size, size), np.float32), "ones")])


def qdq_token_mlp(tokens: int = 16, hidden: int = 32) -> onnx.ModelProto:
    """A matrix/vector chain in QNN QDQ form (uint8, static scales): x -> Q -> DQ -> MatMul(DQ w1)
    -> Q -> DQ -> Relu -> Q -> DQ -> MatMul(DQ w2) -> Q -> DQ -> y."""
    rng = np.random.default_rng(9)
    inits = []

    def qparams(name: str, scale: float, zero: int) -> list[str]:
        inits.extend([numpy_helper.from_array(np.array(scale, np.float32), f"{name}_s"),
                      numpy_helper.from_array(np.array(zero, np.uint8), f"{name}_z")])
        return [f"{name}_s", f"{name}_z"]

    for name, shape in (("w1", (hidden, 2 * hidden)), ("w2", (2 * hidden, hidden))):
        inits.append(numpy_helper.from_array(rng.integers(0, 256, shape).astype(np.uint8), f"{name}_q"))
    nodes = []

    def qdq(src: str, name: str, scale: float, zero: int, out: str = "") -> str:
        params = qparams(name, scale, zero)
        nodes.append(helper.make_node("QuantizeLinear", [src, *params], [f"{name}_q8"], name=f"q_{name}"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q8", *params], [out or f"{name}_f"], name=f"dq_{name}"))
        return out or f"{name}_f"

    def weight(name: str) -> str:
        params = qparams(f"{name}w", 0.002, 128)
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", *params], [f"{name}_f"], name=f"dq_{name}"))
        return f"{name}_f"

    a = qdq("x", "in", 0.02, 128)
    nodes.append(helper.make_node("MatMul", [a, weight("w1")], ["h"], name="up"))
    h = qdq("h", "h", 0.05, 128)
    nodes.append(helper.make_node("Relu", [h], ["r"], name="act"))
    r = qdq("r", "r", 0.025, 0)
    nodes.append(helper.make_node("MatMul", [r, weight("w2")], ["d"], name="down"))
    qdq("d", "d", 0.05, 128, out="y")
    return _model(nodes, [float_info("x", (1, tokens, hidden))], [float_info("y", (1, tokens, hidden))], inits, opset=18)


def reshaped(shape: list[int], source=(1, 16, 64)) -> onnx.ModelProto:
    """x -> Reshape(shape) -> Relu -> y, for the view rule (0 copies the input's length at its index)."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
             helper.make_node("Relu", ["r"], ["y"], name="relu")]
    out = np.empty(source).reshape([source[i] if v == 0 else v for i, v in enumerate(shape)]).shape
    return _model(nodes, [float_info("x", source)], [float_info("y", out)], [_const("shape", shape)], opset=18)


def elu_chain(path) -> str:
    """models/mlp_chain.onnx with its Relu and Tanh made Elu, saved at ``path``.

    QNN runs a Relu or Tanh right after a MatMul + bias inside the HMX kernel (graph_passes/graph/folds.py), so
    in mlp_chain every vector op joins a matrix unit and a micro-batch split has no vector work to overlap.
    Elu is the activation QNN runs on its own HVX kernel (tests/graph_passes/test_fold_agreement.py): the
    chain keeps one vector task per layer, which the split's slices can pair with each other's MatMuls."""
    from pathlib import Path

    model = onnx.load(Path(__file__).resolve().parents[2] / "models" / "mlp_chain.onnx")
    for node in model.graph.node:
        if node.op_type in ("Relu", "Tanh"):
            node.op_type = "Elu"
    onnx.save(model, str(path))
    return str(path)

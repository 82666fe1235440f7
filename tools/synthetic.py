"""Synthetic models of any size for benchmarks and scale tests: stacked parallel-residual LM layers.

Each layer is a GPT-J-style block built from plain ONNX ops (about 30 nodes):

    h ─> LayerNorm ─┬─> q,k,v MatMul ─> Reshape/Transpose ─> MatMul ─> Softmax ─> MatMul ─> out MatMul ─┐
                    └─> fc_in MatMul ─> Gelu (Mul/Pow/Tanh...) ─> fc_out MatMul ──────────────────────────┴─> Add(+h)

Weights are shared by all layers so that a 100k-node model stays a few hundred kB.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NODES_PER_LAYER = 31


def _weights(hidden: int, heads: int, seq: int) -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)

    def tensor(name: str, shape) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32), name)

    head = hidden // heads
    consts = {
        "ln_scale": np.ones(hidden, np.float32) + 0.01, "ln_bias": np.zeros(hidden, np.float32),
        "heads_shape": np.array([seq, heads, head], np.int64), "merge_shape": np.array([seq, hidden], np.int64),
        "half": np.array(0.5, np.float32), "one": np.array(1.0, np.float32), "three": np.array(3.0, np.float32),
        "c1": np.array(0.044715, np.float32), "c2": np.array(0.7978845608, np.float32),
        "inv_sqrt_d": np.array(1.0 / np.sqrt(head), np.float32),
    }
    tensors = [tensor(n, (hidden, hidden)) for n in ("wq", "wk", "wv", "wo")]
    tensors += [tensor("w_in", (hidden, 4 * hidden)), tensor("w_out", (4 * hidden, hidden))]
    tensors += [numpy_helper.from_array(value, name) for name, value in consts.items()]
    return tensors


def _layer(i: int, h: str) -> tuple[list[onnx.NodeProto], str]:
    p = f"l{i}_"
    n = helper.make_node
    nodes = [
        n("LayerNormalization", [h, "ln_scale", "ln_bias"], [p + "ln"], name=p + "ln", axis=-1),
        n("MatMul", [p + "ln", "wq"], [p + "q"], name=p + "q"),
        n("MatMul", [p + "ln", "wk"], [p + "k"], name=p + "k"),
        n("MatMul", [p + "ln", "wv"], [p + "v"], name=p + "v"),
        n("Reshape", [p + "q", "heads_shape"], [p + "q3"], name=p + "q3"),
        n("Reshape", [p + "k", "heads_shape"], [p + "k3"], name=p + "k3"),
        n("Reshape", [p + "v", "heads_shape"], [p + "v3"], name=p + "v3"),
        n("Transpose", [p + "q3"], [p + "qt"], name=p + "qt", perm=[1, 0, 2]),
        n("Transpose", [p + "k3"], [p + "kt"], name=p + "kt", perm=[1, 2, 0]),
        n("Transpose", [p + "v3"], [p + "vt"], name=p + "vt", perm=[1, 0, 2]),
        n("MatMul", [p + "qt", p + "kt"], [p + "scores"], name=p + "scores"),
        n("Mul", [p + "scores", "inv_sqrt_d"], [p + "scaled"], name=p + "scaled"),
        n("Softmax", [p + "scaled"], [p + "probs"], name=p + "probs", axis=-1),
        n("MatMul", [p + "probs", p + "vt"], [p + "ctx"], name=p + "ctx"),
        n("Transpose", [p + "ctx"], [p + "ctx_t"], name=p + "ctx_t", perm=[1, 0, 2]),
        n("Reshape", [p + "ctx_t", "merge_shape"], [p + "ctx2"], name=p + "ctx2"),
        n("MatMul", [p + "ctx2", "wo"], [p + "attn"], name=p + "attn"),
        n("MatMul", [p + "ln", "w_in"], [p + "fc"], name=p + "fc"),
        # tanh-approximated Gelu, decomposed as exporters emit it
        n("Pow", [p + "fc", "three"], [p + "cube"], name=p + "cube"),
        n("Mul", [p + "cube", "c1"], [p + "cube_s"], name=p + "cube_s"),
        n("Add", [p + "fc", p + "cube_s"], [p + "inner"], name=p + "inner"),
        n("Mul", [p + "inner", "c2"], [p + "inner_s"], name=p + "inner_s"),
        n("Tanh", [p + "inner_s"], [p + "tanh"], name=p + "tanh"),
        n("Add", [p + "tanh", "one"], [p + "tanh1"], name=p + "tanh1"),
        n("Mul", [p + "fc", "half"], [p + "half_x"], name=p + "half_x"),
        n("Mul", [p + "half_x", p + "tanh1"], [p + "gelu"], name=p + "gelu"),
        n("MatMul", [p + "gelu", "w_out"], [p + "mlp"], name=p + "mlp"),
        n("Add", [p + "attn", p + "mlp"], [p + "branches"], name=p + "branches"),
        n("Add", [h, p + "branches"], [p + "out"], name=p + "out"),
        n("Identity", [p + "out"], [p + "h"], name=p + "h"),
        n("Relu", [p + "h"], [p + "act"], name=p + "act"),
    ]
    assert len(nodes) == NODES_PER_LAYER
    return nodes, p + "act"


def stacked_lm(layers: int, hidden: int = 16, heads: int = 2, seq: int = 8) -> onnx.ModelProto:
    nodes: list[onnx.NodeProto] = []
    h = "x"
    for i in range(layers):
        layer, h = _layer(i, h)
        nodes += layer
    graph = helper.make_graph(
        nodes, f"stacked_lm_{layers}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [seq, hidden])],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, [seq, hidden])], initializer=_weights(hidden, heads, seq),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model

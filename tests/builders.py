"""Small ONNX models built in code for the tests: one place, named by what they exercise."""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
LIGHT_DIR = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def unfolded_activation_target(name: str = "sm8550") -> str:
    """The bundled target ``name`` with ``folds.activation`` off, as a JSON file (one per session).

    For tests whose subject is mechanics on the bundled CNNs (package generation, executor, bundle,
    verification), not their payoff. QNN runs each Relu inside its Conv's kernel, so with the real
    target a Conv and its Relu form one matrix task, which op_package/qnn_ops.py cannot hand to QNN yet
    (no translation for activations): on HTP those models fuse nothing. Without the fold they fuse
    Conv || Relu and Conv || pool groups as before, which exercise the same code."""
    import atexit
    import json
    import shutil
    import tempfile

    from hexfuse.graph_passes.cost.target import TARGETS_DIR

    if not _UNFOLDED_DIR:
        _UNFOLDED_DIR.append(tempfile.mkdtemp(prefix="hexfuse-test-targets-"))
        atexit.register(shutil.rmtree, _UNFOLDED_DIR[0], True)
    path = os.path.join(_UNFOLDED_DIR[0], f"{name}.json")
    if not os.path.exists(path):
        raw = json.loads((TARGETS_DIR / f"{name}.json").read_text())
        raw["folds"]["activation"]["value"] = False
        with open(path, "w") as f:
            json.dump(raw, f)
    return path


_UNFOLDED_DIR: list[str] = []


def unfolded_activation_scorer(name: str = "sm8550", min_gain: float = 0.1):
    """``unfolded_activation_target`` as a scorer, for the pass called in-process."""
    from hexfuse.graph_passes.cost import load_target
    from hexfuse.graph_passes.cost.cli import scorer_for
    from hexfuse.graph_passes.cost.target import FOLDS

    target = load_target(name)
    return scorer_for(target.with_values(folds=target.folds - set(FOLDS["activation"])), min_gain, as_designed=True)


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


def embedding_branches(rows: int, width: int = 16) -> onnx.ModelProto:
    """ids[1,8] -> Gather(table[rows, width]) -> e; e -> MatMul -> y beside e -> Tanh -> t: an integer input
    that indexes a table (seeded ids must stay below ``rows``)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"], name="gather"),
             helper.make_node("MatMul", ["e", "w"], ["y"], name="mm"), helper.make_node("Tanh", ["e"], ["t"], name="tanh")]
    inits = [_weight(rng, "table", (rows, width)), _weight(rng, "w", (width, width))]
    return _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, 8])],
                  [float_info("y", (1, 8, width)), float_info("t", (1, 8, width))], inits, opset=17)


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


def four_independent(size: int = 8) -> onnx.ModelProto:
    """Two matrix tasks (A, B) and two vector tasks (C, D), all reading only the input: every pair of
    different engines is independent, and no two tasks share a structure (shapes and ops differ)."""
    rng = np.random.default_rng(4)
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["a"], name="A"),
        helper.make_node("MatMul", ["x", "w2"], ["b"], name="B"),
        helper.make_node("Relu", ["x"], ["c"], name="C"),
        helper.make_node("Sigmoid", ["x"], ["d"], name="D"),
    ]
    inits = [_weight(rng, "w1", (size, size)), _weight(rng, "w2", (size, 2 * size))]
    outputs = [float_info("a", (size, size)), float_info("b", (size, 2 * size)), float_info("c", (size, size)),
               float_info("d", (size, size))]
    return _model(nodes, [float_info("x", (size, size))], outputs, inits)


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


def twin_blocks(shapes: tuple[tuple[int, ...], ...] = ((64, 64), (64, 64)), size: int = 64) -> onnx.ModelProto:
    """Independent blocks, each a_k -> MatMul(W) -> Reshape(shape_k) and b_k -> Softmax -> Mul(2): every
    pairing of a matrix and a vector branch is the same group up to renaming, unless a block's Reshape
    reads another shape constant (same output shape, other values: [64, 64] vs [-1, 64])."""
    rng = np.random.default_rng(4)
    nodes, inputs, outputs = [], [], []
    inits = [_weight(rng, "w", (size, size)), numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    for k, shape in enumerate(shapes):
        inits.append(numpy_helper.from_array(np.array(shape, np.int64), f"shape{k}"))
        nodes += [
            helper.make_node("MatMul", [f"a{k}", "w"], [f"m{k}"], name=f"matmul{k}"),
            helper.make_node("Reshape", [f"m{k}", f"shape{k}"], [f"y{k}"], name=f"reshape{k}"),
            helper.make_node("Softmax", [f"b{k}"], [f"sm{k}"], name=f"softmax{k}", axis=-1),
            helper.make_node("Mul", [f"sm{k}", "two"], [f"s{k}"], name=f"scale{k}"),
        ]
        inputs += [float_info(f"a{k}", (size, size)), float_info(f"b{k}", (size, size))]
        outputs += [float_info(f"y{k}", (size, size)), float_info(f"s{k}", (size, size))]
    return _model(nodes, inputs, outputs, inits)


def conv_bn_branches(channels: int = 16, side: int = 16, bn_users: int = 1, per_channel: bool = True,
                     group: int = 1, activation: bool = True) -> onnx.ModelProto:
    """x -> Conv -> BatchNormalization -> Mul(c) -> Relu -> y  beside  x -> MaxPool -> p.

    ``bn_users`` 2 gives the Conv output a second reader (nothing may fold then); ``per_channel`` False
    makes the Mul constant vary over space (not foldable into weights); ``group`` groups the Conv;
    ``activation`` False leaves the Relu out (y is the Mul's output)."""
    rng = np.random.default_rng(5)
    c = rng.standard_normal((channels, 1, 1) if per_channel else (1, side, side)).astype(np.float32)
    inits = [_weight(rng, "w", (channels, channels // group, 3, 3)), numpy_helper.from_array(c, "c")]
    for name in ("gamma", "beta", "mean"):
        inits.append(numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), name))
    inits.append(numpy_helper.from_array(rng.uniform(0.5, 2.0, channels).astype(np.float32), "var"))
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["conv"], name="conv", pads=[1, 1, 1, 1], group=group),
        helper.make_node("BatchNormalization", ["conv", "gamma", "beta", "mean", "var"], ["bn"], name="bn"),
        helper.make_node("Mul", ["bn", "c"], ["scaled"], name="scale"),
        helper.make_node("Relu", ["scaled"], ["y"], name="relu"),
        helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
    ]
    if not activation:
        nodes[2].output[0] = "y"
        del nodes[3]
    shape = (1, channels, side, side)
    outputs = [float_info("y", shape), float_info("p", shape)]
    if bn_users == 2:
        nodes.append(helper.make_node("Sigmoid", ["conv"], ["side"], name="side"))
        outputs.append(float_info("side", shape))
    return _model(nodes, [float_info("x", shape)], outputs, inits)


def save(model: onnx.ModelProto, path) -> str:
    onnx.save(model, str(path))
    return str(path)


def bundled_or_lm(tmp_path, source: str, layers: int = 6) -> str:
    """A bundled model by name, or for "lm" a small stacked LM (tools/synthetic.py) of ``layers`` layers."""
    if source != "lm":
        return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", f"{source}.onnx")
    from hexfuse.tools.synthetic import stacked_lm

    return save(stacked_lm(layers, 16), tmp_path / "lm.onnx")

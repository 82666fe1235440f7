"""Valid models with If/Loop bodies and model-local functions that the pass broke or refused:

- a DQ copy named ``<tensor>_hexfuse_dup`` while a body already defines that name (names.py looked at
  the main graph only): the written model defined it twice;
- a fused node, placed where its first node was, defining a name a body between them also defines;
- sibling bodies each defining one local name: onnx's data propagation refused what its checker and
  ONNX Runtime accept;
- an opset < 13 model's own functions, dropped by the opset upgrade: the written model called a
  function it no longer had. They now come back, or the model is refused in one line where the
  upgrade cannot convert them.
Each written model must load, pass the full checker and compute what the original computes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse import analyze_model
from hexfuse.graph_passes.rewrite.ort_check import compare_on_cpu
from tests import builders
from tests.hardening._support import one_error, run

SMALL_GROUPS = ("--min-gain", "0", "--as-designed", "--allow-scalar", "--allow-merge-only")


def _info(name: str, elem: int = TensorProto.FLOAT, shape=(8, 8)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def _model(nodes, inputs, outputs, initializers, opset: int = 17, functions=(), extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                              functions=list(functions), ir_version=8)
    onnx.checker.check_model(model, full_check=True)  # valid input: the checker and ORT accept it
    return model


def _two_branches() -> list[onnx.NodeProto]:
    """x -> MatMul(w) -> y beside x -> Softmax -> Mul(two) -> s"""
    return [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
            helper.make_node("Softmax", ["x"], ["sm"], name="softmax", axis=-1),
            helper.make_node("Mul", ["sm", "two"], ["s"], name="scale")]


def _weights() -> list[onnx.TensorProto]:
    rng = np.random.default_rng(0)
    return [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two")]


def _branches(then_nodes, then_out: str, else_nodes, else_out: str) -> onnx.NodeProto:
    then_graph = helper.make_graph(then_nodes, "then", [], [_info(then_out)])
    else_graph = helper.make_graph(else_nodes, "else", [], [_info(else_out)])
    return helper.make_node("If", ["cond"], ["br"], then_branch=then_graph, else_branch=else_graph, name="if")


def _dq_copy_name_in_a_body() -> onnx.ModelProto:
    rng = np.random.default_rng(3)
    q = ["scale", "zero"]
    nodes = [helper.make_node("QuantizeLinear", ["x", *q], ["x_q"], name="q_in"),
             helper.make_node("DequantizeLinear", ["x_q", *q], ["x_dq"], name="dq_in"),  # read by both branches
             helper.make_node("DequantizeLinear", ["w_q", "w_scale", "zero"], ["w_dq"], name="dq_w"),
             helper.make_node("MatMul", ["x_dq", "w_dq"], ["y_f"], name="matmul"),
             helper.make_node("QuantizeLinear", ["y_f", *q], ["y_q"], name="q_y"),
             helper.make_node("DequantizeLinear", ["y_q", *q], ["y"], name="dq_y"),
             helper.make_node("Sigmoid", ["x_dq"], ["s_f"], name="sigmoid"),
             helper.make_node("QuantizeLinear", ["s_f", *q], ["s_q"], name="q_s"),
             helper.make_node("DequantizeLinear", ["s_q", *q], ["s"], name="dq_s"),
             _branches([helper.make_node("Relu", ["s"], ["x_dq_hexfuse_dup"]),  # the name the copy would get
                        helper.make_node("Neg", ["x_dq_hexfuse_dup"], ["o"])], "o",
                       [helper.make_node("Abs", ["s"], ["o2"])], "o2")]
    initializers = [numpy_helper.from_array(np.array(0.05, np.float32), "scale"),
                    numpy_helper.from_array(np.array(128, np.uint8), "zero"),
                    numpy_helper.from_array(rng.integers(0, 255, (8, 8)).astype(np.uint8), "w_q"),
                    numpy_helper.from_array(np.array(0.01, np.float32), "w_scale")]
    return _model(nodes, [_info("x"), _info("cond", TensorProto.BOOL, [])], [_info("y"), _info("s"), _info("br")],
                  initializers)


def _fused_output_named_in_an_earlier_body() -> onnx.ModelProto:
    """The outer ``sm`` is defined after the If whose then-branch has its own ``sm``: legal as written,
    not once the Softmax moves up to the MatMul's place in a fused node."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
             _branches([helper.make_node("Relu", ["x"], ["sm"]), helper.make_node("Neg", ["sm"], ["o"])], "o",
                       [helper.make_node("Abs", ["x"], ["o2"])], "o2"),
             helper.make_node("Softmax", ["x"], ["sm"], name="softmax", axis=-1),
             helper.make_node("Mul", ["sm", "two"], ["s"], name="scale")]
    return _model(nodes, [_info("x"), _info("cond", TensorProto.BOOL, [])],
                  [_info("y"), _info("s"), _info("sm"), _info("br")], _weights())


def _sibling_bodies_one_local_name() -> onnx.ModelProto:
    nodes = _two_branches() + [_branches(
        [helper.make_node("Shape", ["y"], ["shape"]), helper.make_node("Reshape", ["y", "shape"], ["o"])], "o",
        [helper.make_node("Shape", ["s"], ["shape"]), helper.make_node("Reshape", ["s", "shape"], ["o2"])], "o2")]
    return _model(nodes, [_info("x"), _info("cond", TensorProto.BOOL, [])], [_info("y"), _info("s"), _info("br")],
                  _weights())


def _upgraded_softmax_in_both_bodies() -> onnx.ModelProto:
    """Opset 12: the upgrade to 13 itself writes one Shape output name into both bodies."""
    nodes = _two_branches() + [_branches([helper.make_node("Softmax", ["y"], ["o"], axis=1)], "o",
                                         [helper.make_node("Softmax", ["s"], ["o2"], axis=1)], "o2")]
    return _model(nodes, [_info("x"), _info("cond", TensorProto.BOOL, [])], [_info("y"), _info("s"), _info("br")],
                  _weights(), opset=12)


@pytest.mark.parametrize("make", [_dq_copy_name_in_a_body, _fused_output_named_in_an_earlier_body,
                                  _sibling_bodies_one_local_name, _upgraded_softmax_in_both_bodies])
def test_models_with_bodies_fuse_into_valid_equal_models(tmp_path, capsys, make):
    source = builders.save(make(), tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", *SMALL_GROUPS)
    assert code == 0, err
    written = (tmp_path / "f.onnx").read_bytes()
    onnx.checker.check_model(onnx.load_model_from_string(written), full_check=True)
    for seed in (0, 1):
        diffs = compare_on_cpu((tmp_path / "m.onnx").read_bytes(), written, seed=seed, level="none")
        assert diffs and all(d.equal for d in diffs), [(d.name, d.max_rel) for d in diffs]


def test_the_name_a_body_defines_keeps_its_writer_in_place(tmp_path):
    result = analyze_model(builders.save(_fused_output_named_in_an_earlier_body(), tmp_path / "m.onnx"),
                           builders.unfolded_activation_scorer())
    flat, units = result.analysis.flat, result.analysis.units
    (softmax,) = [u for u in range(len(units)) if flat.op_types[units.core[u]] == "Softmax"]
    assert units.blocker[softmax].endswith("writes 'sm', a name a subgraph also defines (kept in its place)")
    assert all(flat.op_types[units.core[u]] != "Softmax" for group in result.selection.groups
               for task in group.tasks for u in task.units)


def _with_function() -> onnx.ModelProto:
    """Opset 12 with a function importing the default domain at 12 too: the upgrade cannot convert it."""
    function = helper.make_function("com.user", "MyAct", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                                    [helper.make_opsetid("", 12)])
    nodes = _two_branches() + [helper.make_node("MyAct", ["y"], ["z"], domain="com.user", name="act")]
    return _model(nodes, [_info("x")], [_info("s"), _info("z")], _weights(), opset=12, functions=[function],
                  extra_opsets=[helper.make_opsetid("com.user", 1)])


def test_an_upgrade_the_functions_cannot_follow_is_one_line(tmp_path, capsys):
    source = builders.save(_with_function(), tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", *SMALL_GROUPS, "--no-verify")
    assert code == 1 and "its model-local functions (com.user:MyAct) cannot be upgraded to 13" in one_error(err)
    assert not (tmp_path / "f.onnx").exists()

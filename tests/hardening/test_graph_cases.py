"""Class 6, graph cases: an If/Loop/Scan body reading an intermediate tensor of the main graph made
the rewrite produce an unsorted graph (outer-scope reads were not dataflow); an omitted optional
input "" crashed; a sparse initializer was refused as undefined; a static [0, 64] input was called
dynamic. Outer-scope reads are now input edges in the flat graph (graph_passes/graph/subgraphs.py), so
reachability, the topological order, independence and the fused node's outputs all see them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests.passes import analyze_model, fuse_model
from hexfuse.graph_passes.analysis.reach import Reach
from hexfuse.graph_passes.rewrite.ort_check import compare_on_cpu
from hexfuse.graph_passes.select.balance import BalanceScorer
from tests import builders
from tests.hardening._support import run

ANY_GAIN = BalanceScorer(min_gain=0.0)
S = 16


def _info(name: str, elem: int = TensorProto.FLOAT, shape=(S, S)) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(shape))


def _branch(op: str, reads: str, out: str) -> onnx.GraphProto:
    return helper.make_graph([helper.make_node(op, [reads], [out])], f"{op}_body", [], [_info(out)])


def _if(reads: str, out: str = "br") -> onnx.NodeProto:
    return helper.make_node("If", ["cond"], [out], name="if", then_branch=_branch("Relu", reads, "r"),
                            else_branch=_branch("Neg", reads, "n"))


def _loop(reads: str) -> onnx.NodeProto:
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node("Add", ["v_in", reads], ["v_out"])], "body",
        [_info("i", TensorProto.INT64, []), _info("c_in", TensorProto.BOOL, []), _info("v_in")],
        [_info("c_out", TensorProto.BOOL, []), _info("v_out")])
    return helper.make_node("Loop", ["trip", "", "x"], ["br"], name="loop", body=body)


def _scan(reads: str) -> onnx.NodeProto:
    body = helper.make_graph([helper.make_node("Add", ["row", reads + "_row"], ["out_row"]),
                              helper.make_node("Identity", ["state"], ["state_out"])], "scan_body",
                             [_info("state", shape=(S,)), _info("row", shape=(S,))],
                             [_info("state_out", shape=(S,)), _info("out_row", shape=(S,))])
    # the body reads a row-shaped outer tensor: a Gather of row 0 of ``reads`` made outside
    return helper.make_node("Scan", ["zero_row", "x"], ["state_final", "br"], name="scan", body=body, num_scan_inputs=1)


def _nested(reads: str) -> onnx.NodeProto:
    inner = _if(reads, "inner")
    body = helper.make_graph([helper.make_node("Identity", ["c_in"], ["c_out"]), inner,
                              helper.make_node("Add", ["v_in", "inner"], ["v_out"])], "body",
                             [_info("i", TensorProto.INT64, []), _info("c_in", TensorProto.BOOL, []), _info("v_in")],
                             [_info("c_out", TensorProto.BOOL, []), _info("v_out")])
    return helper.make_node("Loop", ["trip", "", "x"], ["br"], name="loop", body=body)


def _with_control_flow(kind: str) -> onnx.ModelProto:
    """two_branch (MatMul || Softmax -> Mul) whose intermediate ``sm`` only a subgraph reads outside
    the vector task."""
    model = builders.two_branch(S)
    graph = model.graph
    graph.input.append(_info("cond", TensorProto.BOOL, []))
    graph.initializer.extend([numpy_helper.from_array(np.array(2, np.int64), "trip"),
                              numpy_helper.from_array(np.zeros(S, np.float32), "zero_row"),
                              numpy_helper.from_array(np.array(0, np.int64), "row0")])
    if kind == "scan":
        graph.node.append(helper.make_node("Gather", ["sm", "row0"], ["sm_row"], name="row"))
    graph.node.append({"if": _if, "loop": _loop, "scan": _scan, "nested": _nested}[kind]("sm"))
    graph.output.append(_info("br"))
    return model


@pytest.mark.parametrize("kind", ["if", "loop", "scan", "nested"])
def test_subgraph_reads_of_a_fused_intermediate_keep_it_alive_and_ordered(tmp_path, kind):
    path = builders.save(_with_control_flow(kind), tmp_path / "m.onnx")
    result = fuse_model(path, ANY_GAIN)
    assert result.changed
    fused = onnx.load_model_from_string(result.model_bytes)
    onnx.checker.check_model(fused, full_check=True)  # also proves the order: `sm` defined before its reader
    if kind != "scan":  # in scan the Gather reads sm explicitly
        assert "sm" in [t.name for op in result.spec.fused_ops for t in op.outputs]
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


def test_a_subgraph_between_two_tasks_makes_them_dependent(tmp_path):
    """x -> MatMul -> y ┄┄(read inside If)┄┄> If -> br -> Softmax: the MatMul and the Softmax look
    independent through explicit edges only; fused together they would close a cycle."""
    model = builders._model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"), _if("y"),
         helper.make_node("Softmax", ["br"], ["s"], name="softmax")],
        [_info("x"), _info("cond", TensorProto.BOOL, [])], [_info("y"), _info("s")],
        [builders._weight(np.random.default_rng(0), "w", (S, S))])
    result = analyze_model(builders.save(model, tmp_path / "m.onnx"), ANY_GAIN)
    assert not result.fused_ops
    assert result.analysis.reach.reaches(*(result.analysis.units.unit_of[i] for i in (0, 2))) is Reach.YES


def test_an_unsorted_file_is_sorted_by_its_subgraph_reads(tmp_path):
    model = _with_control_flow("if")
    nodes = list(model.graph.node)
    del model.graph.node[:]
    model.graph.node.extend([nodes[-1], *nodes[:-1]])  # the If first, before Softmax makes `sm`
    result = fuse_model(builders.save(model, tmp_path / "m.onnx"), ANY_GAIN)
    assert result.changed
    onnx.checker.check_model(onnx.load_model_from_string(result.model_bytes), full_check=True)


def test_a_dequantize_read_by_a_subgraph_and_a_node(tmp_path):
    model = builders.qdq_two_branch(S)
    model.graph.input.append(_info("cond", TensorProto.BOOL, []))
    model.graph.node.append(_if("x_dq"))
    model.graph.output.append(_info("br"))
    result = fuse_model(builders.save(model, tmp_path / "m.onnx"), ANY_GAIN)
    onnx.checker.check_model(onnx.load_model_from_string(result.model_bytes), full_check=True)
    assert all(d.equal for d in compare_on_cpu(result.analyzed.loaded.raw, result.model_bytes))


@pytest.mark.parametrize("quantized", [False, True])
def test_an_omitted_optional_input_fuses_and_builds(tmp_path, capsys, quantized):
    """Clip(x, "", max): no minimum."""
    model = builders.qdq_two_branch(S) if quantized else builders.two_branch(S)
    model.graph.initializer.append(numpy_helper.from_array(np.array(0.5, np.float32), "hi"))
    vector = next(n for n in model.graph.node if n.op_type in ("Sigmoid", "Softmax"))
    vector.op_type, vector.input[:] = "Clip", [vector.input[0], "", "hi"]
    del vector.attribute[:]
    source = builders.save(model, tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 0 and "1 fused node " in err, err
    spec = (tmp_path / "f.hexfuse.json").read_text()
    assert '"inputs":["' in spec and '"",' in spec  # the omitted input kept as "" in the spec
    if not quantized:
        code, err = run(capsys, "oppkg", tmp_path / "f.onnx", "-o", tmp_path / "pkg", "--build", "host")
        assert code == 0, err


def test_sparse_initializers_are_read_dense(tmp_path, capsys):
    model = builders.two_branch(S)
    dense = numpy_helper.to_array(model.graph.initializer[0])
    keep = np.flatnonzero(np.abs(dense) > 1.0)
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(dense.reshape(-1)[keep], "w"),
                                       numpy_helper.from_array(keep.astype(np.int64), "w_indices"), list(dense.shape))
    del model.graph.initializer[0]
    model.graph.sparse_initializer.append(sparse)
    source = builders.save(model, tmp_path / "m.onnx")
    code, err = run(capsys, "fuse", source, "-o", tmp_path / "f.onnx", "--min-gain", "0", "--as-designed", "--allow-scalar")
    assert code == 0 and "1 fused node " in err, err
    assert "sparse initializers stored dense" in (tmp_path / "f.hexfuse.md").read_text()
    assert all(d.equal for d in compare_on_cpu(onnx.load(source).SerializeToString(), (tmp_path / "f.onnx").read_bytes()))


def test_a_malformed_sparse_initializer_is_one_line(tmp_path, capsys):
    model = builders.two_branch(S)
    del model.graph.initializer[0]
    model.graph.sparse_initializer.append(helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones(2, np.float32), "w"), numpy_helper.from_array(np.array([0, S * S], np.int64), "i"),
        [S, S]))
    code, err = run(capsys, "fuse", builders.save(model, tmp_path / "m.onnx"), "-o", tmp_path / "f.onnx")
    assert code == 1 and "sparse initializer 'w' is malformed" in err


def test_a_static_empty_input_is_not_called_dynamic(tmp_path):
    """Static, so not dynamic; empty, so nothing to compute (and no kernel could be built for it)."""
    model = builders.two_branch(S)
    for info in (*model.graph.input, *model.graph.output):
        info.type.tensor_type.shape.dim[0].dim_value = 0
    result = analyze_model(builders.save(model, tmp_path / "m.onnx"), ANY_GAIN)
    reasons = [u.blocker or "" for u in result.analysis.units.units] + list(result.selection.reasons.values())
    assert not any("dynamic" in r or "no static shape" in r for r in reasons)
    assert any("is empty (a 0 dimension)" in r for r in reasons) and not result.fused_ops

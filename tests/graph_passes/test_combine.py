"""``hexfuse combine``: requests sharing a model run their row-wise chains once on all their rows.

Real exported models (the bundled Llama prefill + decode, float and QDQ; a prefill and two decodes merged
by ``hexfuse merge``) and small graphs built here for the row rules; each combine is checked on ONNX
Runtime against running every request alone, and against changing one request's inputs only.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.cli import main
from hexfuse.graph_passes.analysis.sources import REQUESTS_KEY
from hexfuse.graph_passes.combine.report import to_json
from hexfuse.graph_passes.combine.plan import plan_combine
from hexfuse.graph_passes.combine.requantize import requantize
from hexfuse.graph_passes.combine.rows import COUPLES_ROWS
from hexfuse.graph_passes.combine.run import combine_requests
from hexfuse.graph_passes.combine.verify import RELATIVE_BOUND, verify_combined
from hexfuse.graph_passes.combine.view import request_view
from hexfuse.graph_passes.load.model import load_model
from hexfuse.graph_passes.merge.requests import merge_requests
from hexfuse.graph_passes.rewrite.ort_check import random_inputs

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
LLAMA = MODELS / "llama_prefill_decode.onnx"
LLAMA_QDQ = MODELS / "llama_prefill_decode_qdq.onnx"


def _run(model: onnx.ModelProto | Path, feeds: dict) -> dict[str, np.ndarray]:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))


@pytest.fixture(scope="module")
def llama():
    return combine_requests(LLAMA)


def test_llama_projections_norms_mlp_and_head_run_once_on_both_requests(llama):
    assert llama.view.names == ["prefill", "decode"]
    assert llama.chosen == [0]  # the other chains read no weight (attention's scale and mask): not combined
    assert all("no matrix op on a weight" in llama.refused[i] for i in range(1, len(llama.plan.chains)))
    chain = llama.plan.chains[0]
    ops = Counter(llama.view.nodes[llama.plan.counterparts.tuples[t][0]].op_type for t in chain.tuples)
    # 2 layers x (q, k, v, o, gate, up, down) + the LM head; 2 x 2 RMSNorms + the final one; per layer the
    # Reshapes into heads (q, k, v: their targets hold the request's rows) and back, and RoPE's rotate-half
    assert ops["MatMul"] == 15 and ops["ReduceMean"] == 5 and ops["Gather"] == 1 and ops["Reshape"] == 8
    assert ops["Slice"] == 8 and ops["Neg"] == 4
    # in: the token ids and each layer's attention-weighted values; out: per layer q and k before RoPE's
    # multiply by cos/sin (the decode computes its tables from its position, the prefill's are constants),
    # both rotate-halves, v, and the logits
    assert [e[0] for e in chain.entries] == ["prefill_input_ids", "matmul_1", "matmul_3"]
    assert len(chain.exits) == 11 and chain.exits[-1] == ("prefill_logits", "decode_logits")
    written = Counter(node.op_type for node in llama.model.graph.node)
    assert written["Split"] == 11
    assert written["MatMul"] == 38 - 15  # 15 MatMuls of each request became one each
    priced = llama.prices[0]
    assert priced.rows == (16, 1) and priced.padded_rows == (64, 32)
    assert priced.weight_bytes_apart == 2 * priced.weight_bytes_combined > 0


def test_llama_combined_outputs_equal_each_request_alone_and_do_not_mix(llama):
    assert llama.verification.passed
    assert all(c.exact == c.outputs == 5 and c.independent for c in llama.verification.checks)
    feeds = random_inputs(llama.reference, seed=11)
    want, got = _run(LLAMA, feeds), _run(llama.model, feeds)
    assert want.keys() == got.keys()
    for name in want:
        np.testing.assert_array_equal(want[name], got[name])
    # the graph's interface is the merged model's: a runtime feeds it the same way
    assert [i.name for i in llama.model.graph.input] == [i.name for i in llama.reference.graph.input]
    assert [o.name for o in llama.model.graph.output] == [o.name for o in llama.reference.graph.output]


def test_llama_attention_stays_per_request_with_its_reason(llama):
    rows = to_json(llama)["kept_per_request"]
    by_op: dict[str, set[str]] = {}
    for row in rows:
        by_op.setdefault(row["op"], set()).add(row["reason"])
    assert any(r.startswith("attention: a MatMul of two activations") for r in by_op["MatMul"])
    assert any("KV cache" in r for r in by_op["Concat"])
    # RoPE's multiply by the tables: constants in the prefill, computed from the position in the decode
    assert any("is a constant in one request and computed in another" in r for r in by_op["Mul"])
    # the scores' scale, mask and Softmax could share rows (equal key counts here) but read no weight
    assert all("no matrix op on a weight" in r for r in by_op["Softmax"])
    combined = {m for i in llama.chosen for t in llama.plan.chains[i].tuples for m in llama.plan.counterparts.tuples[t]}
    kept = {i for i, r in enumerate(llama.view.request_of) if r >= 0} - combined
    assert sum(row["count"] for row in rows) == len(kept)  # every node kept per request has a row, none dropped


def test_prefill_and_two_decodes_merged_by_hexfuse_combine(tmp_path):
    merged = merge_requests([MODELS / "llama_prefill.onnx", MODELS / "llama_decode.onnx", MODELS / "llama_decode.onnx"],
                            ["prefill", "d1", "d2"])
    path = tmp_path / "three.onnx"
    path.write_bytes(merged.model.SerializeToString())
    assert len(merged.mapping["requests"]) == 3
    result = combine_requests(path)
    assert result.view.names == ["prefill", "d1", "d2"]
    assert result.chosen and result.prices[result.chosen[0]].rows == (16, 1, 1)
    priced = result.prices[result.chosen[0]]
    assert priced.weight_bytes_apart == 3 * priced.weight_bytes_combined
    assert result.verification.passed and all(c.exact == c.outputs for c in result.verification.checks)


def test_qdq_requests_calibrated_apart_are_refused_naming_the_tensor(tmp_path, capsys):
    assert main(["combine", str(LLAMA_QDQ), "-o", str(tmp_path / "c.onnx")]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert re.match(r"hexfuse: \d+ tensors are quantized differently by the requests, each ending a chain; the first: "
                    r"the requests quantize 'pow_1_QuantizeLinear_Output' with different encodings", first)
    result = combine_requests(LLAMA_QDQ)
    assert not any(result.prices[i].weight_bytes_combined for i in result.chosen)  # no projection combined
    reasons = set(result.plan.apart.values())
    assert any(r.startswith("the requests quantize 'mul_4_QuantizeLinear_Output' with different encodings")
               and "--requantize" in r for r in reasons)


@pytest.fixture(scope="module")
def llama_requantized():
    return combine_requests(LLAMA_QDQ, requantized=True)


def test_qdq_requantized_combine_keeps_every_quantized_op_a_qdq_unit(llama_requantized):
    result = llama_requantized
    assert result.requantized and all(min(r.coarser) >= 1.0 - 1e-6 for r in result.requantized)
    assert result.chosen and result.prices[result.chosen[0]].weight_bytes_combined > 0
    # against the requantized merged model the combine changes nothing; what requantizing changed is reported
    assert all(c.exact == c.outputs for c in result.verification.checks)
    assert all(c.max_rel > 0 for c in result.requantize_change.checks)
    graph = result.model.graph
    producer = {t: n for n in graph.node for t in n.output}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for t in node.input:
            readers.setdefault(t, []).append(node)
    fed = {i.name for i in graph.input}  # the token ids: int64, not quantized
    for node in graph.node:
        if node.op_type in ("MatMul", "Concat", "Split") and node.name.startswith("hexfuse.combined/") and \
                not set(node.input) <= fed:
            assert all(producer[t].op_type == "DequantizeLinear" for t in node.input if t in producer), node.name
            assert all(r.op_type == "QuantizeLinear" for t in node.output for r in readers.get(t, [])), node.name


# ---- small graphs: the row rules ---------------------------------------------------------------------------------


def _two_requests(body, rows=(3, 1), features=8, extra_initializers=()) -> onnx.ModelProto:
    """Two requests ``a`` and ``b`` with inputs [1, rows, features], each through ``body(prefix, x) -> (nodes, y)``,
    sharing the initializers ``body`` names without a prefix."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((features, features)).astype(np.float32), "W"),
               numpy_helper.from_array(rng.standard_normal((features,)).astype(np.float32), "g"),
               *extra_initializers]
    nodes, inputs, outputs = [], [], []
    for prefix, count in zip(("a/", "b/"), rows):
        inputs.append(helper.make_tensor_value_info(prefix + "x", TensorProto.FLOAT, [1, count, features]))
        made, y = body(prefix, prefix + "x")
        nodes += made
        outputs.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "two", inputs, outputs, weights)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    entry = model.metadata_props.add()
    entry.key, entry.value = REQUESTS_KEY, json.dumps([["a", "a/"], ["b", "b/"]])
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def _norm_mlp(softmax_axis: int):
    def body(p: str, x: str):
        return [
            helper.make_node("LayerNormalization", [x, "g"], [p + "n"], name=p + "norm", axis=-1),
            helper.make_node("MatMul", [p + "n", "W"], [p + "h"], name=p + "proj"),
            helper.make_node("Softmax", [p + "h"], [p + "s"], name=p + "softmax", axis=softmax_axis),
            helper.make_node("MatMul", [p + "s", "W"], [p + "y"], name=p + "out"),
        ], p + "y"
    return body


def test_row_wise_chain_combines_whole_and_matches_each_request():
    model = _two_requests(_norm_mlp(softmax_axis=-1))
    plan = plan_combine(request_view(model))
    assert len(plan.chains) == 1 and len(plan.chains[0].tuples) == 4 and not plan.apart
    assert plan.axis["a/h"] == 1 and plan.rows("a/h") == (3, 1)


def test_softmax_over_the_rows_is_kept_per_request_and_splits_the_chain():
    model = _two_requests(_norm_mlp(softmax_axis=1))
    view = request_view(model)
    plan = plan_combine(view)
    softmax = {view.nodes[i].name: r for i, r in plan.apart.items() if view.nodes[i].op_type == "Softmax"}
    assert set(softmax) == {"a/softmax", "b/softmax"}
    assert all(r.startswith(COUPLES_ROWS) for r in softmax.values())
    assert len(plan.chains) == 2  # norm + proj before it, out after it


def test_reduce_over_features_without_keepdims_moves_the_row_axis():
    def body(p: str, x: str):
        return [helper.make_node("MatMul", [x, "W"], [p + "h"], name=p + "proj"),
                helper.make_node("ReduceSum", [p + "h", "axes"], [p + "y"], name=p + "sum", keepdims=0)], p + "y"
    axes = numpy_helper.from_array(np.array([0, 2], dtype=np.int64), "axes")
    model = _two_requests(body, extra_initializers=[axes])
    plan = plan_combine(request_view(model))
    assert len(plan.chains) == 1 and plan.axis["a/y"] == 0  # [1, rows, 8] summed over 0 and 2: rows on axis 0


def test_weight_as_the_left_operand_is_not_row_wise():
    def body(p: str, x: str):
        return [helper.make_node("Transpose", [x], [p + "t"], name=p + "t", perm=[0, 2, 1]),
                helper.make_node("MatMul", ["W", p + "t"], [p + "y"], name=p + "mm")], p + "y"
    view = request_view(_two_requests(body, rows=(3, 3)))
    plan = plan_combine(view)
    reasons = {view.nodes[i].name: r for i, r in plan.apart.items()}
    assert reasons["a/mm"].startswith("the activation is its right operand")


def test_verification_catches_a_combine_that_mixes_requests():
    """A Softmax over rows run on both requests' rows at once (what plan.py refuses) is caught twice:
    the outputs differ from the merged model's, and one request's outputs move with the other's inputs."""
    reference = _two_requests(lambda p, x: ([helper.make_node("Softmax", [x], [p + "y"], name=p + "s", axis=1)], p + "y"))
    wrong = helper.make_model(helper.make_graph(
        [helper.make_node("Concat", ["a/x", "b/x"], ["both"], axis=1),
         helper.make_node("Softmax", ["both"], ["ys"], axis=1),
         helper.make_node("Split", ["ys", "rows"], ["a/y", "b/y"], axis=1)],
        "wrong", list(reference.graph.input), list(reference.graph.output),
        [numpy_helper.from_array(np.array([3, 1], dtype=np.int64), "rows")]),
        opset_imports=[helper.make_opsetid("", 18)])
    result = verify_combined(request_view(reference), reference.SerializeToString(), wrong.SerializeToString())
    assert not result.passed
    assert all(c.max_rel > RELATIVE_BOUND and not c.independent for c in result.checks)


# ---- the command ---------------------------------------------------------------------------------------------------


def test_cli_writes_model_and_reports_byte_identically_and_leaves_the_input_alone(tmp_path, capsys):
    before = LLAMA.read_bytes()
    outs = []
    for name in ("one", "two"):
        assert main(["combine", str(LLAMA), "-o", str(tmp_path / name / "c.onnx")]) == 0
        outs.append([(tmp_path / name / f).read_bytes() for f in ("c.onnx", "c.combine.md", "c.combine.json")])
    assert outs[0] == outs[1]
    assert LLAMA.read_bytes() == before
    report = json.loads(outs[0][2])
    assert report["requests"] == ["prefill", "decode"] and report["chains"][0]["combined"]
    said = capsys.readouterr().err
    assert re.search(r"1 of \d+ chains combined across 2 requests \(prefill, decode\)", said)
    assert f"wrote {tmp_path / 'two' / 'c.onnx'}, {tmp_path / 'two' / 'c.combine.md'}, " in said  # where they are


def test_cli_refuses_a_single_request_in_one_line(tmp_path, capsys):
    assert main(["combine", str(MODELS / "llama_decode.onnx"), "-o", str(tmp_path / "x.onnx")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds one request" in err
    assert not (tmp_path / "x.onnx").exists()


def test_merge_asks_one_name_per_model(tmp_path, capsys):
    code = main(["merge", str(MODELS / "llama_decode.onnx"), str(MODELS / "llama_decode.onnx"),
                 str(MODELS / "llama_decode.onnx"), "--names", "a", "b", "-o", str(tmp_path / "m.onnx")])
    assert code == 1 and "2 request names for 3 models" in capsys.readouterr().err


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn is not installed")
def test_requantized_combined_qdq_llama_runs_whole_on_qnn_htp_like_its_reference(tmp_path):
    result = combine_requests(LLAMA_QDQ, requantized=True)
    reference, combined = tmp_path / "reference.onnx", tmp_path / "combined.onnx"
    reference.write_bytes(result.reference.SerializeToString())
    combined.write_bytes(result.model.SerializeToString())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    here = Path(__file__).parent
    claimed = subprocess.run([sys.executable, str(here / "qnn_claimed.py"), str(combined)],
                             capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert claimed.returncode == 0, claimed.stderr[-2000:]
    summary = json.loads(claimed.stdout.strip().splitlines()[-1])[str(combined)]
    assert summary["partitions"] == 1 and set(summary["per_ep"]) == {"QNNExecutionProvider"}, summary
    compared = subprocess.run([sys.executable, str(here / "qnn_compare.py"), str(reference), str(combined)],
                              capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert compared.returncode == 0, compared.stderr[-2000:]
    (row,) = json.loads(compared.stdout.strip().splitlines()[-1])
    # QNN picks kernels by shape (a 1-row decode projection and a 17-row one need not round alike): each
    # output within one step of its own quantization; measured: 9 of 10 bit-exact, the decode logits 1 step
    graph = result.reference.graph
    producer = {t: n for n in graph.node for t in n.output}
    scales = {init.name: float(numpy_helper.to_array(init).reshape(-1)[0]) for init in graph.initializer}
    steps = [scales[producer[o.name].input[1]] for o in graph.output]
    assert len(row["max_abs"]) == 10 and sum(d == 0.0 for d in row["max_abs"]) >= 8, row
    assert all(d <= step * 1.001 for d, step in zip(row["max_abs"], steps)), (row, steps)


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn is not installed")
def test_report_gives_both_forms_replayed_once_engines_prepared_them(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HEXFUSE_ENGINES_CACHE", str(tmp_path / "engines"))
    out = tmp_path / "c.onnx"
    args = ["combine", str(LLAMA_QDQ), "-o", str(out), "--requantize", "--target", "sm8650"]
    assert main(args) == 0
    report = json.loads(out.with_suffix(".combine.json").read_text())
    assert report["qnn_schedule_replayed"]["combined"] is None  # not prepared yet: the report says how
    assert "`hexfuse engines MODEL --target sm8650`" in out.with_suffix(".combine.md").read_text()
    done = subprocess.run([sys.executable, "-m", "hexfuse.cli", "engines", str(out), "--target", "sm8650"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT, env={**os.environ})
    assert done.returncode == 0, done.stderr[-2000:]
    assert main(args) == 0
    replayed = json.loads(out.with_suffix(".combine.json").read_text())["qnn_schedule_replayed"]
    assert replayed["merged"]["t2_us"] > 0 and replayed["combined"]["t2_us"] > 0  # the merged map ships in models/engines


def test_rope_joins_with_each_requests_tables_concatenated():
    """x W -> heads (a Reshape whose target holds the request's rows) -> x * cos(positions) -> back -> W:
    one chain, its Reshape targets and cos table rebuilt for the rows of both requests."""
    rng = np.random.default_rng(1)
    nodes, inputs, outputs = [], [], []
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "W")]
    for p, rows, first in (("a/", 3, 0), ("b/", 1, 3)):
        inputs.append(helper.make_tensor_value_info(p + "x", TensorProto.FLOAT, [1, rows, 8]))
        outputs.append(helper.make_tensor_value_info(p + "y", TensorProto.FLOAT, None))
        cos = np.cos(np.arange(first, first + rows)[:, None] * np.arange(1, 5)[None, :]).astype(np.float32)
        inits += [numpy_helper.from_array(np.array([1, rows, 2, 4], np.int64), p + "heads"),
                  numpy_helper.from_array(np.array([1, rows, 8], np.int64), p + "back"),
                  numpy_helper.from_array(cos, p + "cos")]
        nodes += [helper.make_node("MatMul", [p + "x", "W"], [p + "h"], name=p + "q"),
                  helper.make_node("Reshape", [p + "h", p + "heads"], [p + "r"], name=p + "heads"),
                  helper.make_node("Transpose", [p + "r"], [p + "t"], name=p + "t", perm=[0, 2, 1, 3]),
                  helper.make_node("Mul", [p + "t", p + "cos"], [p + "rot"], name=p + "rope"),
                  helper.make_node("Transpose", [p + "rot"], [p + "u"], name=p + "u", perm=[0, 2, 1, 3]),
                  helper.make_node("Reshape", [p + "u", p + "back"], [p + "v"], name=p + "back"),
                  helper.make_node("MatMul", [p + "v", "W"], [p + "y"], name=p + "o")]
    model = helper.make_model(helper.make_graph(nodes, "rope", inputs, outputs, inits),
                              opset_imports=[helper.make_opsetid("", 18)])
    entry = model.metadata_props.add()
    entry.key, entry.value = REQUESTS_KEY, json.dumps([["a", "a/"], ["b", "b/"]])
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    view = request_view(model)
    plan = plan_combine(view)
    assert not plan.apart and len(plan.chains) == 1 and len(plan.chains[0].tuples) == 7
    tables = {view.nodes[plan.counterparts.tuples[t][0]].name: v for (t, _), v in plan.constants.items()}
    assert tables["a/heads"].tolist() == [1, 4, 2, 4] and tables["a/back"].tolist() == [1, 4, 8]
    assert tables["a/rope"].shape == (4, 4)  # the prefill's 3 positions and the decode's 1
    from hexfuse.graph_passes.combine.rewrite import combine_model
    combined = combine_model(plan, [0])
    result = verify_combined(view, model.SerializeToString(), combined.SerializeToString())
    assert result.passed and all(c.exact == c.outputs for c in result.checks)


def test_merge_of_two_pairs_keeps_each_pairs_shared_constants_apart(tmp_path):
    """decode@KV15 twice and a model whose shape constants hold other values twice: each pair shares its
    own constants under their own name once, the other pair's keep a prefixed name (no name clash)."""
    small = tmp_path / "small.onnx"
    model = onnx.load(MODELS / "llama_decode.onnx")
    for init in model.graph.initializer:  # other bytes under the same names
        if init.data_type == TensorProto.FLOAT:
            values = numpy_helper.to_array(init)
            init.CopyFrom(numpy_helper.from_array((values * 1.5).astype(values.dtype), init.name))
    small.write_bytes(model.SerializeToString())
    decode = MODELS / "llama_decode.onnx"
    merged = merge_requests([decode, decode, small, small], ["d0", "d1", "e0", "e1"])
    names = [init.name for init in merged.model.graph.initializer]
    assert len(names) == len(set(names))
    feeds = random_inputs(merged.model, seed=3)
    got = _run(merged.model, feeds)
    for request, path in zip(merged.mapping["requests"], (decode, decode, small, small)):
        own = {k: feeds[v] for k, v in request["inputs"].items()}
        for name, value in _run(path, own).items():
            np.testing.assert_array_equal(value, got[request["outputs"][name]])


def test_two_images_of_one_vision_model_run_as_one_batch(tmp_path):
    merged = merge_requests([MODELS / "googlenet.onnx", MODELS / "googlenet.onnx"])
    path = tmp_path / "two.onnx"
    path.write_bytes(merged.model.SerializeToString())
    result = combine_requests(path)
    (chain,) = [result.plan.chains[i] for i in result.chosen]
    ops = Counter(result.view.nodes[result.plan.counterparts.tuples[t][0]].op_type for t in chain.tuples)
    assert ops["Conv"] == 13 and ops["Gemm"] == 1  # every Conv on the batch axis: two images, weights read once
    assert all(result.plan.axis[result.view.nodes[result.plan.counterparts.tuples[t][0]].output[0]] == 0
               for t in chain.tuples)
    assert all(c.exact == c.outputs and c.independent for c in result.verification.checks)


def test_a_chain_starts_at_the_requests_own_graph_input():
    """x * x -> mean -> MatMul: the first ops read no weight; the requests' inputs named alike (a/x, b/x)
    correspond, so the statistics join the chain instead of staying per request."""
    def body(p: str, x: str):
        return [helper.make_node("Mul", [x, x], [p + "sq"], name=p + "sq"),
                helper.make_node("ReduceMean", [p + "sq", "axes"], [p + "m"], name=p + "mean", keepdims=1),
                helper.make_node("Mul", [x, p + "m"], [p + "s"], name=p + "scale"),
                helper.make_node("MatMul", [p + "s", "W"], [p + "y"], name=p + "proj")], p + "y"
    axes = numpy_helper.from_array(np.array([-1], dtype=np.int64), "axes")
    view = request_view(_two_requests(body, extra_initializers=[axes]))
    plan = plan_combine(view)
    assert not plan.apart and len(plan.chains) == 1 and len(plan.chains[0].tuples) == 4
    assert plan.chains[0].entries == [("a/x", "b/x")]


def test_bound_is_relative_for_float_outputs_and_in_steps_for_dequantized_ones():
    from hexfuse.graph_passes.combine.verify import STEP_BOUND, _compared, output_steps
    graph = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"]), helper.make_node("Relu", ["x"], ["r"])], "g",
        [helper.make_tensor_value_info("q", TensorProto.UINT16, [4]), helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]), helper.make_tensor_value_info("r", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(0.5, np.float32), "s"), numpy_helper.from_array(np.array(7, np.uint16), "z")])
    steps = output_steps(helper.make_model(graph))
    assert steps == {"y": 0.5}
    reference = np.array([100.0, -3.0, 2.5, 0.0], np.float32)
    assert _compared(reference, reference + np.float32(0.5 * STEP_BOUND) * np.array([0, 1, 0, 0], np.float32), 0.5)[2]
    assert not _compared(reference, reference + np.float32(0.5 * (STEP_BOUND + 1)) * np.array([0, 1, 0, 0], np.float32),
                         0.5)[2]
    assert _compared(reference, reference * np.float32(1 + 5e-6), None)[2]  # a float output: relative
    assert not _compared(reference, reference + np.float32(0.01), None)[2]


def test_analyze_says_what_combine_would_do_for_requests_and_nothing_for_one(capsys):
    assert main(["analyze", str(LLAMA)]) == 0
    assert "requests prefill, decode share weights: `hexfuse combine` would run 15 matrix ops once" in capsys.readouterr().err
    assert main(["analyze", str(MODELS / "llama_decode.onnx")]) == 0
    assert "hexfuse combine" not in capsys.readouterr().err


def test_int4_weights_count_their_packed_bytes(tmp_path):
    # a 4-bit weight is read as two per byte (numpy unpacks it to one per byte: w4a16 layers were priced 2x)
    w4 = helper.make_tensor("W4", TensorProto.INT4, [8, 8], (np.arange(64) % 16 - 8).tolist())
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "s")

    def body(p: str, x: str):
        return [helper.make_node("DequantizeLinear", ["W4", "s"], [p + "w"], name=p + "dq"),
                helper.make_node("MatMul", [x, p + "w"], [p + "y"], name=p + "proj")], p + "y"
    model = _two_requests(body, extra_initializers=[w4, scale])
    model.opset_import[0].version = 21  # int4 DequantizeLinear
    assert request_view(model).weight_bytes["W4"] == 32  # 64 elements
    onnx.save(model, tmp_path / "two.onnx")
    result = combine_requests(tmp_path / "two.onnx", everything=True)  # (too small to pay: combined anyway)
    assert [(result.prices[i].weight_bytes_apart, result.prices[i].weight_bytes_combined) for i in result.chosen] \
        == [(64, 32)]
    assert result.verification.passed


def test_requantize_gives_one_encoding_only_where_a_chosen_chain_needs_it(llama_requantized):
    # attention's tensors stay per request: a shared encoding there only coarsens a request's steps (4.7x for the
    # prefill's scores); requantizing every corresponding tensor moved the decode's outputs 9% of their largest value
    _, every = requantize(request_view(load_model(LLAMA_QDQ).inferred))
    result = llama_requantized
    assert len(result.requantized) < len(every)
    assert "matmul_QuantizeLinear_Output" not in {r.tensor for r in result.requantized}  # layer 0's scores
    # what is combined stays what requantizing every tensor combined (o_proj's input Q included: a chain entry)
    assert [result.prices[i].weight_bytes_combined for i in result.chosen] == [81920]
    assert {c.request: round(c.max_rel, 3) for c in result.requantize_change.checks} == {"prefill": 0.08, "decode": 0.029}

"""Tests for the committed ONNX models in models/ and their catalog (onnx + onnxruntime + numpy only).

The models are built by `python models/build_models.py --out models/` (needs torch); these tests only
read the committed files.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models_testlib import (  # noqa: E402
    MODELS_DIR,
    Reach,
    independent_heavy_pairs,
    load_catalog,
    make_feeds,
    static_shape,
)

CATALOG = load_catalog()
ENTRIES = CATALOG["models"]
BY_FILE = {e["file"]: e for e in ENTRIES}
FILES = [e["file"] for e in ENTRIES]
QDQ_FILES = [e["file"] for e in ENTRIES if e["kind"] == "qdq"]

REQUIRED = {
    "gptj_block.onnx", "llama_prefill_decode.onnx", "googlenet.onnx", "moe_layer.onnx",
    "gptj_block_qdq.onnx", "googlenet_qdq.onnx",
}

_MODEL_CACHE: dict[str, onnx.ModelProto] = {}


def load(file: str) -> onnx.ModelProto:
    if file not in _MODEL_CACHE:
        _MODEL_CACHE[file] = onnx.load(str(MODELS_DIR / file))
    return _MODEL_CACHE[file]


def session(file: str) -> ort.InferenceSession:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(str(MODELS_DIR / file), so, providers=["CPUExecutionProvider"])


# ---------------------------------------------------------------------------------------------- catalog


def test_catalog_covers_required_models_and_every_onnx_file():
    on_disk = {p.name for p in MODELS_DIR.glob("*.onnx")}
    assert REQUIRED <= set(FILES), REQUIRED - set(FILES)
    assert set(FILES) == on_disk, {"not in catalog": on_disk - set(FILES), "missing": set(FILES) - on_disk}
    assert len(FILES) == len(set(FILES))
    assert len(QDQ_FILES) >= 2
    assert any(not e["independent_branches"] for e in ENTRIES), "need a negative control"
    for e in ENTRIES:
        assert e["kind"] in ("float", "qdq")
        assert set(e["inputs"]) == set(e["dtype"]) == set(e["input_values"]), e["file"]
        if e["kind"] == "qdq":
            assert BY_FILE[e["float_model"]]["kind"] == "float"
            assert e["inputs"] == BY_FILE[e["float_model"]]["inputs"]
            assert e["independent_branches"] == BY_FILE[e["float_model"]]["independent_branches"]


@pytest.mark.parametrize("file", FILES)
def test_file_matches_catalog(file):
    e = BY_FILE[file]
    data = (MODELS_DIR / file).read_bytes()
    assert len(data) == e["size_bytes"] < 2_000_000
    assert hashlib.sha256(data).hexdigest() == e["sha256"], "file changed without rebuilding the catalog"
    m = load(file)
    assert len(m.graph.node) == e["nodes"]
    assert {(o.domain or "ai.onnx"): o.version for o in m.opset_import} == e["opset"]
    assert 13 <= e["opset"]["ai.onnx"] <= 21
    ins = {i.name: static_shape(i) for i in m.graph.input}
    assert ins == e["inputs"]
    outs = {o.name: static_shape(o) for o in m.graph.output}
    assert outs == e["outputs"]
    dt = {i.name: onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name for i in m.graph.input}
    assert dt == e["dtype"]
    init_names = {i.name for i in m.graph.initializer}
    assert not (set(ins) & init_names), "initializers must not be graph inputs"


# ---------------------------------------------------------------------------------------------- validity


@pytest.mark.parametrize("file", FILES)
def test_checker_and_strict_shape_inference(file):
    m = load(file)
    onnx.checker.check_model(m, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True, data_prop=True)
    # float models are plain float32 (QDQ models add uint8 / int32 tensors)
    if BY_FILE[file]["kind"] == "float":
        for init in m.graph.initializer:
            assert init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT64), (init.name, init.data_type)
    else:
        ops = {n.op_type for n in m.graph.node}
        assert {"QuantizeLinear", "DequantizeLinear"} <= ops
        q_types = {
            init.data_type for init in m.graph.initializer
            if any(n.op_type == "DequantizeLinear" and n.input[0] == init.name for n in m.graph.node)
        }
        assert onnx.TensorProto.UINT8 in q_types, q_types
    assert len(inferred.graph.value_info) >= len(m.graph.value_info)


@pytest.mark.parametrize("file", FILES)
def test_all_shapes_static(file):
    m = load(file)
    for vi in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        assert static_shape(vi) is not None, f"{vi.name} has a non-static shape"
    # every intermediate tensor has a recorded (static) shape
    known = {vi.name for vi in list(m.graph.value_info) + list(m.graph.output)}
    produced = {o for n in m.graph.node for o in n.output if o}
    assert produced <= known, sorted(produced - known)[:10]
    # the inferred shapes agree with what onnxruntime actually produces for the outputs
    outs = session(file).run(None, make_feeds(BY_FILE[file], seed=0))
    assert [list(o.shape) for o in outs] == [static_shape(o) for o in m.graph.output]


@pytest.mark.parametrize("file", FILES)
def test_runs_on_cpu_with_finite_nondegenerate_outputs(file):
    sess = session(file)
    e = BY_FILE[file]
    assert [i.name for i in sess.get_inputs()] == list(e["inputs"])
    a = sess.run(None, make_feeds(e, seed=1))
    b = sess.run(None, make_feeds(e, seed=2))
    for name, x, y in zip(e["outputs"], a, b):
        assert np.all(np.isfinite(x)) and np.all(np.isfinite(y)), name
        assert x.dtype == np.dtype(e["output_dtype"][name])
        assert float(np.std(x)) > 0, f"{name} is constant"
    # different inputs give different outputs (the model is not ignoring its inputs)
    assert not np.array_equal(a[0], b[0])


@pytest.mark.parametrize("file", QDQ_FILES)
def test_qdq_tracks_float_model(file):
    e = BY_FILE[file]
    feeds = make_feeds(e, seed=3)
    q = session(file).run(None, feeds)
    f = session(e["float_model"]).run(None, feeds)
    for name, x, y in zip(e["outputs"], q, f):
        x, y = x.astype(np.float64).ravel(), y.astype(np.float64).ravel()
        corr = float(np.corrcoef(x, y)[0, 1])
        assert corr > 0.9, (name, corr)


# ---------------------------------------------------------------------------------------------- structure


@pytest.mark.parametrize("file", FILES)
def test_independent_branch_flag_matches_graph(file):
    """Positive models have at least one pair of mutually independent MatMul/Gemm/Conv nodes; the
    negative control has none."""
    n = independent_heavy_pairs(load(file).graph)
    if BY_FILE[file]["independent_branches"]:
        assert n > 0, file
    else:
        assert n == 0, (file, n)


def _one(r: Reach, op: str) -> int:
    idx = r.idx({op})
    assert len(idx) == 1, (op, len(idx))
    return idx[0]


@pytest.mark.parametrize("file", [f for f in FILES if f.startswith("gptj_block")])
def test_gptj_attention_parallel_to_mlp(file):
    g = load(file).graph
    r = Reach(g)
    softmax, tanh = _one(r, "Softmax"), _one(r, "Tanh")  # attention softmax; gelu_new tanh of the MLP
    assert r.independent(softmax, tanh)
    lns = r.idx({"LayerNormalization"})
    shared = [ln for ln in lns if r.reaches(ln, softmax) and r.reaches(ln, tanh)]
    assert len(shared) == 1, "attention and MLP must read the same ln_1"
    # MatMuls on each side: q/k/v + 2 attention matmuls + out_proj vs fc_in, fc_out
    mm = r.idx({"MatMul"})
    attn_side = [m for m in mm if r.independent(m, tanh)]
    mlp_side = [m for m in mm if r.independent(m, softmax)]
    assert len(attn_side) >= 4 and len(mlp_side) >= 2, (len(attn_side), len(mlp_side))


def test_neox_attention_parallel_to_mlp():
    r = Reach(load("neox_block.onnx").graph)
    softmax, erf = _one(r, "Softmax"), _one(r, "Erf")
    assert r.independent(softmax, erf)


@pytest.mark.parametrize("file", [f for f in FILES if f.startswith("googlenet")])
def test_googlenet_inception_branches(file):
    g = load(file).graph
    r = Reach(g)
    concats = [i for i in r.idx({"Concat"}) if len(r.nodes[i].input) == 4]
    assert len(concats) == 2
    for c in concats:
        prods = [r.producer[t] for t in r.nodes[c].input]
        for i in range(4):
            for j in range(i + 1, 4):
                assert r.independent(prods[i], prods[j])
        common = r.anc[prods[0]] & r.anc[prods[1]] & r.anc[prods[2]] & r.anc[prods[3]]
        own = [(r.anc[p] | (1 << p)) & ~common for p in prods]
        kinds = [sorted({r.nodes[k].op_type for k in range(len(r.nodes)) if (o >> k) & 1}) for o in own]
        n_pool = sum("MaxPool" in k for k in kinds)
        assert n_pool == 1, kinds
        assert all("Conv" in k for k in kinds), kinds


@pytest.mark.parametrize("file", [f for f in FILES if f.startswith("moe_layer")])
def test_moe_shared_expert_parallel_to_router(file):
    r = Reach(load(file).graph)
    topk = _one(r, "TopK")
    gemms = [i for i in r.idx({"Gemm", "MatMul"}) if r.independent(i, topk)]
    assert len(gemms) >= 4, len(gemms)  # shared expert gate/up/down + shared_expert_gate


def test_moe_dense_experts_independent():
    r = Reach(load("moe_experts_dense.onnx").graph)
    topk = _one(r, "TopK")
    experts = [i for i in r.idx({"MatMul"}) if r.independent(i, topk)]
    assert len(experts) == 12  # 4 experts x (gate, up, down)
    downs = [i for i in experts if any(r.reaches(j, i) for j in experts)]
    assert len(downs) == 4
    for i, a in enumerate(downs):
        for b in downs[i + 1 :]:
            assert r.independent(a, b)


LLAMA = [f for f in FILES if f.startswith("llama_prefill_decode")]


@pytest.mark.parametrize("file", LLAMA)
def test_llama_requests_structurally_independent(file):
    e = BY_FILE[file]
    req = e["requests"]
    assert set(req) == {"prefill", "decode"}
    assert set(req["prefill"]["inputs"]) | set(req["decode"]["inputs"]) == set(e["inputs"])
    assert set(req["prefill"]["outputs"]) | set(req["decode"]["outputs"]) == set(e["outputs"])
    g = load(file).graph
    r = Reach(g)
    out_producer = {o: r.producer[o] for o in e["outputs"]}
    pre_nodes = decode_nodes = 0
    for name, p in out_producer.items():
        own, other = ("prefill", "decode") if name in req["prefill"]["outputs"] else ("decode", "prefill")
        deps = r.input_deps[p]
        assert deps & set(req[own]["inputs"]), (name, deps)
        assert not deps & set(req[other]["inputs"]), (name, deps)
        cone = r.anc[p] | (1 << p)  # the output's producer and all its ancestors
        if own == "prefill":
            pre_nodes |= cone
        else:
            decode_nodes |= cone
    # the two requests share no data-dependent node: only initializers and, in the QDQ model, the
    # DequantizeLinear nodes of the shared weights (nodes that read initializers only)
    shared = [k for k in range(len(r.nodes)) if (pre_nodes & decode_nodes) >> k & 1]
    for k in shared:
        assert not r.input_deps[k], (r.nodes[k].name, r.input_deps[k])
        assert all(t in {i.name for i in g.initializer} for t in r.nodes[k].input), r.nodes[k].name
    if e["kind"] == "float":
        assert not shared
    assert bin(pre_nodes).count("1") > 50 and bin(decode_nodes).count("1") > 50


@pytest.mark.parametrize("file", LLAMA)
def test_llama_requests_functionally_independent(file):
    e = BY_FILE[file]
    req = e["requests"]
    sess = session(file)
    names = [o.name for o in sess.get_outputs()]
    base_feeds = make_feeds(e, seed=11)
    base = dict(zip(names, sess.run(None, base_feeds)))
    for changed in ("prefill", "decode"):
        kept = "decode" if changed == "prefill" else "prefill"
        feeds = dict(base_feeds)
        other = make_feeds(e, seed=12)
        for n in req[changed]["inputs"]:
            if e["input_values"][n]["kind"] in ("randn", "randint"):
                feeds[n] = other[n]
        assert any(not np.array_equal(feeds[n], base_feeds[n]) for n in req[changed]["inputs"])
        got = dict(zip(names, sess.run(None, feeds)))
        for o in req[kept]["outputs"]:
            np.testing.assert_array_equal(got[o], base[o], err_msg=f"{o} changed when {changed} inputs changed")
        logits = f"{changed}_logits"
        assert not np.array_equal(got[logits], base[logits]), f"{logits} ignores its own request's inputs"


# ---------------------------------------------------------------------------------------------- QNN HTP


def _qnn_available() -> bool:
    try:
        import onnxruntime_qnn  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.skipif(not _qnn_available(), reason="onnxruntime-qnn not installed (pip install onnxruntime-qnn)")
def test_qdq_models_run_fully_on_qnn_htp_simulator():
    """Every QDQ model compiles for the QNN HTP backend (x86 simulator) and every node except the boundary
    Quantize/DequantizeLinear of graph inputs/outputs is assigned to the QNN EP."""
    probe = Path(__file__).resolve().parent / "_models_qnn_probe.py"
    env = dict(os.environ)
    proc = subprocess.run([sys.executable, str(probe), *QDQ_FILES], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    for f in QDQ_FILES:
        res = result[f]
        assert "error" not in res, (f, res.get("error"))
        assert res["finite"], f
        m = load(f)
        n_io = len(m.graph.input) + len(m.graph.output)
        on_cpu = [a for a in res["assignment"] if a["ep"] != "QNNExecutionProvider"]
        on_qnn = [a for a in res["assignment"] if a["ep"] == "QNNExecutionProvider"]
        assert len(on_qnn) >= len(m.graph.node) - n_io, (f, len(on_qnn), len(m.graph.node))
        assert len(on_cpu) <= n_io, (f, on_cpu)
        bad = [a for a in on_cpu if a["op_type"] not in ("QuantizeLinear", "DequantizeLinear")]
        assert not bad, (f, bad[:5])

"""Generator options of tools/realsize.py (head-group split, attention only, layers in a row), the
YOLOv8n-style detector of tools/realsize_vision.py, the head-group overlap reading of
tools/realsize_heads.py, and the bench's rendering of rows. CPU only, small sizes."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import onnxruntime as ort
import pytest

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools import realsize_heads
from hexfuse.tools.bench import bench_realsize
from hexfuse.tools.realsize import CONFIGS, Layer, build, example_inputs, parse_layer
from hexfuse.tools.realsize_vision import Anchor, Detector, parse_vision

TINY = CONFIGS["tiny"]


def _run(model, layer):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, example_inputs(layer, 0))


@pytest.mark.parametrize("mode", ["prefill", "decode"])
def test_head_groups_compute_the_unsplit_layer(mode):
    whole = Layer(TINY, mode, 16, "float")
    split = Layer(TINY, mode, 16, "float", head_groups=2)
    nodes = [n.op_type for n in split.float_model().graph.node]
    assert nodes.count("Softmax") == 2 and nodes.count("Split") == 3  # q, k, v split over the groups
    for a, b in zip(_run(whole.float_model(), whole), _run(split.float_model(), split)):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_head_groups_must_divide_the_kv_heads():
    with pytest.raises(HexfuseError, match="divide the 2 KV heads"):
        Layer(TINY, "prefill", 16, head_groups=3)


def test_attention_only_and_two_layers():
    attn = Layer(TINY, "prefill", 16, "float", attention_only=True)
    ops = {n.op_type for n in attn.float_model().graph.node}
    assert "Softmax" in ops and "Sigmoid" not in ops  # no SwiGLU
    two = Layer(TINY, "decode", 8, "float", layers=2)
    assert set(two.inputs()) == {"x", "past_k", "past_v", "past_k_l1", "past_v_l1"}
    outs = _run(two.float_model(), two)
    assert [o.shape for o in outs] == [(1, 1, 256)] + [(1, 2, 9, 64)] * 4
    feeds = example_inputs(two, 0)
    np.testing.assert_array_equal(outs[3][:, :, :8], feeds["past_k_l1"])  # layer 1's cache is its own
    one = Layer(TINY, "decode", 8, "float")
    assert not np.allclose(outs[0], _run(one.float_model(), one)[0])  # the second layer acts


def test_options_parse_and_keep_the_default_stems_and_keys():
    layer = parse_layer("llama-3.2-1b:prefill:1024:attn:g4:legacy")
    assert (layer.head_groups, layer.attention_only, layer.precision) == (4, True, "w8a8")
    assert layer.stem == "llama-3.2-1b_prefill1024_w8a8_attn_g4"
    assert parse_layer("tiny:decode:8:x2:w8a16:legacy").stem == "tiny_decode8_w8a16_x2"
    assert parse_layer("tiny:decode:8:w4a16").opset == 21  # int4 weights need opset 21
    plain = Layer(TINY, "prefill", 16)
    assert plain.options == {} and plain.key != Layer(TINY, "prefill", 16, head_groups=2).key
    with pytest.raises(HexfuseError, match="unknown option"):
        parse_layer("tiny:prefill:16:fast")


def test_detector_builds_quantized_and_runs(tmp_path):
    det = Detector(64, "w8a8")
    path = build(det, tmp_path)
    assert path.name.startswith("yolov8n_64_w8a8") and build(det, tmp_path) == path  # cached
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    outs = session.run(None, example_inputs(det, 0))
    assert [o.shape for o in outs] == [(1, 144, 8, 8), (1, 144, 4, 4), (1, 144, 2, 2)]
    assert all(np.isfinite(o).all() for o in outs)
    assert parse_vision("yolov8n:640") == Detector(640) and parse_vision("llama-3.2-1b:decode:8") is None
    assert isinstance(bench_realsize.parse_source("anchor:resnet50_w8a8"), Anchor)
    with pytest.raises(HexfuseError, match="multiple of 32"):
        Detector(100)


def test_cross_group_overlap_reads_gates_and_replayed_times():
    # two groups: group 0's softmax (op 2) runs beside group 1's QK^T (op 1); group 1's softmax (op 3) after it
    ops = [SimpleNamespace(node=n, resource=r) for n, r in
           (("qk_g0_node", "hmx"), ("qk_g1_node", "hmx"), ("probs_g0_node", "hvx"), ("probs_g1_node", "hvx"))]
    order = {(0, 2), (1, 3), (0, 1)}
    schedule = SimpleNamespace(ops=ops, of_nodes=lambda names: [i for i, o in enumerate(ops) if o.node in names],
                               ordered=lambda a, b: (a, b) in order or (b, a) in order)
    replayed = SimpleNamespace(starts=[0, 1000, 1000, 3000], ends=[1000, 3000, 2000, 4000])
    g0, g1 = realsize_heads.cross_group_overlap(schedule, replayed, ["_g0", "_g1"])
    assert (g0.unordered, g0.softmax_us, g0.hidden_us) == (1, 1.0, 1.0)
    assert (g1.unordered, g1.hidden_us) == (1, 0.0)  # unordered with group 0's QK^T but replayed after it
    assert "| 50%" not in realsize_heads.render([("m", "sm8650", 4.0, [g0, g1])]) and "(50%)" in \
        realsize_heads.render([("m", "sm8650", 4.0, [g0, g1])])


def _row():
    c = bench_realsize.Candidate("qk || v_rep", 500.0, 160.0, 75.0, 3800.0, None, False, "too little to hide: x",
                                 t4_any_us=3750.0, copies=3, estimated="rejected", work={7: 500e3})
    held = bench_realsize.Candidate("a || b", 1.0, 2.0, None, 3800.0, None, False, "no", held="cannot be held together")
    schedule = {"qnn_ops": 10, "hmx_ops": 2, "replay_us": 3800.0, "main_busy_us": 1.0, "hvx_busy_us": 2.0,
                "hvx_beside_hmx": 1, "hvx_ops": 5, "estimated_share": 0.5, "replay_reordered_us": 3800.0}
    return bench_realsize.Row("m", "sm8650", 12.0, "", schedule, 0, [c, held])


def test_bench_renders_a_row_and_round_trips_it(tmp_path):
    row = _row()
    ratio = row.candidates[0].ratio
    assert ratio == pytest.approx(3750.0 / 3800.0)
    for text in (bench_realsize.render([row]), bench_realsize.render_summary([row]), bench_realsize.render([row], top=1)):
        assert "| m | sm8650 |" in text
    summary = bench_realsize.render_summary([row]).splitlines()[-1]
    assert f"{ratio:.3f} (qk ∥ v_rep)" in summary and f"{row.ceiling_us:.1f}" in summary
    c = row.candidates[0]  # the credit: the replay's saving, at most the task work less the added ops
    assert c.credited_us == min(c.t2_us - c.t4_any_us, c.vector_us - c.added_us) and f"{c.credited_us:.1f} (" in summary
    assert row.candidates[1].credited_us is None
    again = bench_realsize.from_json(json.loads(json.dumps(bench_realsize.to_json([row]))))
    assert bench_realsize.render_summary(again) == bench_realsize.render_summary([row])
    failed = bench_realsize.Row("m", "sm8750", 1500.0, "simulator prepare did not finish in 1500 s")
    assert "did not finish" in bench_realsize.render_summary([failed])


def test_cross_head_pairs_are_independent_softmax_matmul_pairs(tmp_path, monkeypatch):
    monkeypatch.setenv("HEXFUSE_ENGINES_CACHE", str(tmp_path))  # no map: the op-type rules decide
    layer = Layer(TINY, "prefill", 16, "w8a8", head_groups=2, attention_only=True)
    result, _ = bench_realsize._analyze(build(layer, tmp_path), "sm8650", False, 0.1)
    analysis = result.analysis
    pairs = realsize_heads.cross_head_pairs(layer)(analysis)
    named = [{analysis.flat.node(i).name for t in pair for i in analysis.task_nodes(t)} for pair in pairs]
    assert len(pairs) == 2  # group 0's softmax beside group 1's QK^T, and the other way round
    for g, h in ((0, 1), (1, 0)):
        assert any({f"probs_g{g}_node", f"qk_g{h}_node"} <= names for names in named)
    assert all(f"qk_g{g}_node" not in names or f"probs_g{g}_node" not in names for names in named for g in (0, 1))


def test_bound_names_the_busiest_resource():
    from hexfuse.tools.realsize_bound import Bound, render

    hvx = Bound(100.0, 20.0, 15.0, 90.0, 0.7, 40.0, 50.0)
    ddr = Bound(100.0, 20.0, 15.0, 90.0, 0.7, 40.0, 120.0)  # more bytes than t2 allows: the replay is optimistic
    assert (hvx.bound_by, ddr.bound_by) == ("HVX", "DDR")
    assert "| HVX |" in render([("m", "sm8650", hvx)]) and "(70%)" in render([("m", "sm8650", hvx)])

"""tools/realsize.py and tools/bench/bench_realsize.py on one small layer with real per-head dimensions
(hidden 256, 4 heads, 2 KV heads, head_dim 64, MLP 512, prefill 16): built, run on ONNX Runtime (CPU),
analyzed by the pass; where onnxruntime-qnn is installed, prepared on the HTP simulator and judged by
the replay of QNN's schedule. The real sizes run in the benchmark, not here."""

from __future__ import annotations

import json
from importlib.util import find_spec

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.bench import bench_realsize
from hexfuse.tools.realsize import CONFIGS, Config, Layer, build, example_inputs, float_model, parse_layer

TINY = CONFIGS["tiny"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("realsize")


@pytest.fixture(scope="module")
def prefill(cache):
    return build(Layer(TINY, "prefill", 16, "w8a8"), cache)


def _run(path, layer):
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, example_inputs(layer, 0))


def test_prefill_runs_on_cpu_with_the_layer_shapes(prefill):
    layer = Layer(TINY, "prefill", 16, "w8a8")
    y, k, v = _run(prefill, layer)
    assert y.shape == (1, 16, 256) and k.shape == v.shape == (1, 2, 16, 64)
    assert np.isfinite(y).all()
    ops = {n.op_type for n in onnx.load(str(prefill)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear", "MatMul", "Softmax", "Expand", "Neg", "Sigmoid"} <= ops


def test_decode_concats_the_cache_and_quantized_tracks_float(cache):
    layer = Layer(TINY, "decode", 32, "float")
    y, k, v = _run(build(layer, cache), layer)
    assert y.shape == (1, 1, 256) and k.shape == v.shape == (1, 2, 33, 64)
    feeds = example_inputs(layer, 0)
    np.testing.assert_array_equal(k[:, :, :32], feeds["past_k"])  # the past is concatenated in front
    q = build(Layer(TINY, "decode", 32, "w8a8"), cache)
    yq = _run(q, Layer(TINY, "decode", 32, "w8a8"))[0]
    assert np.corrcoef(y.ravel(), yq.ravel())[0, 1] > 0.9


def test_cache_key_and_parse():
    a, b = Layer(TINY, "prefill", 16), Layer(TINY, "prefill", 32)
    assert a.key != b.key and a.key == Layer(TINY, "prefill", 16, "w8a8").key
    assert parse_layer("llama-3.2-1b:decode:512:w8a16:legacy") == Layer(CONFIGS["llama-3.2-1b"], "decode", 512, "w8a16")
    with pytest.raises(HexfuseError, match="unknown config"):
        parse_layer("gpt5:prefill:1")
    with pytest.raises(HexfuseError, match="mode"):
        Layer(TINY, "train", 1)
    mha = Config("mha", 256, 4, 4, 64, 512)  # as phi-3.5-mini: as many KV heads as heads, no repeat
    assert "Expand" not in {n.op_type for n in float_model(Layer(mha, "decode", 8, "float")).graph.node}


def test_the_pass_analyzes_it_without_a_schedule(prefill, monkeypatch, tmp_path):
    monkeypatch.setenv("HEXFUSE_ENGINES_CACHE", str(tmp_path))  # no map: the op-type rules decide
    summary, fused, candidates = bench_realsize.judge_candidates(prefill, "sm8650", 0.1)
    assert summary == {} and candidates == [] and fused >= 0


@pytest.mark.skipif(find_spec("onnxruntime_qnn") is None, reason="onnxruntime-qnn not installed")
def test_simulator_schedule_is_replayed_and_every_rejection_has_a_reason(prefill, monkeypatch, tmp_path):
    monkeypatch.setenv("HEXFUSE_ENGINES_CACHE", str(tmp_path))
    seconds, note = bench_realsize.prepare(prefill, "sm8650", 300, tmp_path)
    assert note == "" and seconds is not None
    summary, fused, candidates = bench_realsize.judge_candidates(prefill, "sm8650", 0.1)
    assert isinstance(fused, int)
    assert summary["replay_us"] > 0 and summary["replay_reordered_us"] > 0 and summary["hmx_ops"] > 0 and 0 < summary["estimated_share"] < 1
    assert candidates, "the estimated cost model finds candidate groups in a decoder layer"
    for c in candidates:
        assert c.t2_us == summary["replay_us"] or abs(c.t2_us - summary["replay_us"]) < 1e-3
        assert c.accepted or c.reason
        assert c.t4_us is None or c.t4_any_us == c.t4_us  # the fused form replayed as the verdict replays it
        assert (c.t4_any_us is None) == bool(c.held) and (c.copies > 0) == (c.t4_any_us is not None)
    assert bench_realsize.prepare(prefill, "sm8650", 300, tmp_path) == (round(seconds, 1), "")  # cached, time kept
    row = bench_realsize.Row("tiny", "sm8650", None, "", summary, 0, candidates)  # a map prepared elsewhere
    assert "| tiny | sm8650 | cached |" in bench_realsize.render([row])
    again = bench_realsize.from_json(json.loads(json.dumps(bench_realsize.to_json([row]))))  # --json writes it
    assert bench_realsize.render_summary(again) == bench_realsize.render_summary([row])

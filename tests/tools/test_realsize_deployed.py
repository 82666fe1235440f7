"""tools/realsize_deployed.py: the deployed form computes the legacy layer's numbers from a transposed K cache
without expanding KV, takes and gives 8-bit KV when quantized, and reads a Hugging Face config.json. Small
configs only (real per-head dims); the real sizes run in tools/llm_predict.py."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.realsize import CONFIGS, Config, Layer, build, parse_layer, write_layer
from hexfuse.tools.realsize_deployed import DeployedLayer, LmHead, causal_mask

TINY = CONFIGS["tiny"]


def _run(model, feeds):
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)


@pytest.mark.parametrize("attention", ["grouped", "per_head"])
@pytest.mark.parametrize("config", [TINY, Config("mha", 128, 2, 2, 64, 256)])
def test_decode_equals_the_legacy_layer_with_the_cache_transposed(config, attention):
    legacy = Layer(config, "decode", 8, "float")
    deployed = DeployedLayer(config, "decode", 8, "float", attention=attention)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 1, config.hidden)).astype(np.float32)
    past_k = rng.standard_normal((1, config.kv_heads, 8, config.head_dim)).astype(np.float32)
    past_v = rng.standard_normal(past_k.shape).astype(np.float32)
    y_old, k_old, v_old = _run(legacy.float_model(), {"x": x, "past_k": past_k, "past_v": past_v})
    feeds = {"x": x, "attention_mask": causal_mask(1, 8)}
    n = config.kv_heads
    if attention == "grouped":  # one cache, the KV heads its batch, K stored transposed
        feeds["past_k"], feeds["past_v"] = past_k[0].transpose(0, 2, 1), past_v[0]
    else:  # one cache per KV head
        for j in range(n):
            feeds[f"past_k_h{j}"], feeds[f"past_v_h{j}"] = past_k[:, j].transpose(0, 2, 1), past_v[:, j]
    model = deployed.float_model()
    y, *kv = _run(model, feeds)
    np.testing.assert_allclose(y, y_old, rtol=1e-4, atol=1e-4)
    new_k = np.concatenate(kv[:n]) if attention == "per_head" else kv[0]
    new_v = np.concatenate(kv[n:]) if attention == "per_head" else kv[1]
    # only the new token's K/V come out, K transposed
    np.testing.assert_allclose(new_k, k_old[0, :, -1:, :].transpose(0, 2, 1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(new_v, v_old[0, :, -1:, :], rtol=1e-5, atol=1e-5)
    assert not {"Expand", "Transpose"} & {node.op_type for node in model.graph.node}


def test_prefill_equals_the_legacy_layer_and_nothing_is_expanded():
    legacy, deployed = Layer(TINY, "prefill", 6, "float"), DeployedLayer(TINY, "prefill", 6, "float")
    x = np.random.default_rng(4).standard_normal((1, 6, TINY.hidden)).astype(np.float32)
    y_old = _run(legacy.float_model(), {"x": x})[0]
    model = deployed.float_model()
    y = _run(model, {"x": x, "attention_mask": causal_mask(6, 0)})[0]
    np.testing.assert_allclose(y, y_old, rtol=1e-4, atol=1e-4)
    ops = [n.op_type for n in model.graph.node]
    # per head: 4 q + 2 k + 2 v projections, QK^T and PV per query head, o, gate, up, down
    assert "Expand" not in ops and ops.count("MatMul") == 4 + 2 + 2 + 2 * 4 + 4
    # one Transpose, of the normed activation (K comes out of its projection transposed): never the cache
    assert [n.output[0] for n in model.graph.node if n.op_type == "Transpose"] == ["attn_norm_t"]


@pytest.mark.parametrize("precision", ["w8a8", "w4a16"])
def test_quantized_layer_takes_and_gives_8bit_kv(tmp_path, precision):
    layer = DeployedLayer(TINY, "prefill", 4, precision, past=6)
    path = build(layer, tmp_path)
    model = onnx.load(str(path))
    types = {v.name: v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output)}
    kv = [f"{kind}_h{j}" for kind in ("past_k", "past_v", "new_k", "new_v") for j in range(2)]
    assert {types[name] for name in kv} == {onnx.TensorProto.UINT8} and types["x"] == onnx.TensorProto.FLOAT
    feeds = layer.feeds(0)
    for name in kv[:4]:
        feeds[name] = np.random.default_rng(5).integers(0, 256, feeds[name].shape, dtype=np.uint8)
    y, k0, k1, v0, v1 = _run(path, feeds)
    assert y.shape == (1, 4, TINY.hidden) and k0.shape == (1, 64, 4) and v1.shape == (1, 4, 64) and k0.dtype == np.uint8
    # no QuantizeLinear is left on an input: the cache is read as stored
    assert not any(n.op_type == "QuantizeLinear" and n.input[0].startswith("past_") for n in model.graph.node)


def test_hf_config_and_parse(tmp_path):
    raw = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
           "num_hidden_layers": 3, "head_dim": 64, "rope_theta": 500000.0, "vocab_size": 1000, "tie_word_embeddings": True}
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(raw))
    config = Config.from_hf(path)
    assert (config.hidden, config.heads, config.kv_heads, config.head_dim, config.mlp, config.layers, config.vocab,
            config.rope_theta, config.tied) == (256, 4, 2, 64, 512, 3, 1000, 500000.0, True)
    assert Config.from_hf({**raw, "head_dim": None, "num_key_value_heads": None}).kv_heads == 4  # MHA, hidden/heads
    with pytest.raises(HexfuseError, match="not a Llama-family"):
        Config.from_hf({"hidden_size": 8})
    layer = parse_layer(f"{path}:prefill:16:w4a16:p32")
    assert isinstance(layer, DeployedLayer) and layer.keys == 48 and layer.config == config
    assert isinstance(parse_layer("tiny:decode:8:legacy"), Layer)
    assert parse_layer("tiny:decode:8").grouped and not parse_layer("tiny:prefill:8").grouped
    with pytest.raises(HexfuseError, match="one new token"):
        DeployedLayer(TINY, "prefill", 8, attention="grouped")
    with pytest.raises(HexfuseError, match="legacy"):
        parse_layer("tiny:decode:8:g2")
    assert parse_layer("tiny:decode:8").key != parse_layer("tiny:decode:9").key
    assert write_layer(TINY, "decode", 8, "float", cache=tmp_path).name.startswith("tiny_decode8_float_deployed")


def test_lm_head_is_the_vocabulary_projection():
    head = LmHead(TINY, 3, "float", vocab_slice=2)
    (logits,) = _run(head.float_model(), head.feeds(0))
    assert logits.shape == (1, 3, TINY.vocab // 2)

"""tools/llm_predict.py on synthetic schedules (no simulator): the DDR floor counts what one pass reads, no
prediction falls below it, the published figure is found, and the command prints one JSON object."""

from __future__ import annotations

import json

import pytest

from hexfuse.graph_passes.cost.target import load_target
from hexfuse.graph_passes.engines.qnn_schedule import QnnSchedule, ScheduledOp
from hexfuse.tools import llm_predict
from hexfuse.tools.realsize import CONFIGS


def schedule(ddr: int, slices: int = 50) -> QnnSchedule:
    ops = [ScheduledOp(0, "main", "ConvLayer_s1", "hmx", "", -1, -1, (), 0, ddr, 10**7, -1)]
    ops += [ScheduledOp(0, "vec", "SlicePad", "hvx", "", -1, -1, (0,), 1536, 0, 0, -1) for _ in range(slices)]
    return QnnSchedule(tuple(ops))


def test_floor_counts_weights_cache_head_and_rows():
    c = CONFIGS["llama-3.2-1b"]
    layer, head, row = llm_predict.weight_params(c)
    assert layer == 2048 * (32 + 16) * 64 + 32 * 64 * 2048 + 3 * 2048 * 8192 and head == 2048 * 128256
    cache = 2 * 8 * 64 * 4096  # 8-bit K and V of 4095 cached tokens and the new one
    assert llm_predict.floor_bytes(c, "w4a16", 1, 4095) == 16 * (layer / 2 + cache) + head * 1 + 2048 * 2
    assert llm_predict.floor_bytes(c, "w8a8", 1, 4095) > llm_predict.floor_bytes(c, "w4a16", 1, 4095)


@pytest.mark.parametrize("sustained", [0.4, 1.0])
def test_no_prediction_below_its_floor_and_the_published_row_is_found(sustained):
    t = load_target("sm8750").with_values(qnn_op_floor_fraction=0.05, qnn_op_half_ns=100.0, qnn_hvx_rate_scale=1.0,
                                          ddr_sustained_fraction=sustained, graph_execute_ns=1.0)
    c = CONFIGS["llama-3.2-1b"]
    layer_bytes = int(llm_predict.floor_bytes(c, "w4a16", 1, 4095) / c.layers)  # a layer that only reads
    p = llm_predict.predict(c, "decode", t, "w4a16", kv=4095, schedule=schedule(layer_bytes))
    assert p.predicted_ms >= p.floor_ms and p.bound == "DDR"
    assert p.published_ms == pytest.approx(18.643) and "llama_v3_2_1b_instruct/perf.yaml@52c080d2" in p.published_source
    assert p.splits == 3 and p.execute_ms == pytest.approx(3 * t.graph_execute_ns / 1e6)  # NUM_SPLITS of the 1B
    assert p.predicted_ms == pytest.approx(p.layers * p.layer_ms + p.lm_head_ms + p.embedding_ms + p.execute_ms)
    busy = llm_predict.predict(c, "decode", t, "w4a16", kv=4095, schedule=schedule(1000, slices=20000))
    assert busy.bound == "HVX" and busy.predicted_ms > p.predicted_ms


def test_json_command(monkeypatch, capsys, tmp_path):
    seen = {}

    def fake(config, phase, tokens, kv, precision, target, log=None):
        seen.update(phase=phase, tokens=tokens, kv=kv)
        return schedule(10**6)

    monkeypatch.setattr(llm_predict, "layer_schedule", fake)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "intermediate_size": 512, "num_hidden_layers": 2, "vocab_size": 1000}))
    assert llm_predict.main([str(cfg), "--phase", "prefill", "--tokens", "64", "--target", "sm8650", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["predicted_ms"] >= out["floor_ms"] > 0 and out["published_ms"] is None and out["layers"] == 2
    assert seen == {"phase": "prefill", "tokens": 64, "kv": 4096 - 64}
    assert llm_predict.main([str(tmp_path / "none.json")]) == 1
    assert llm_predict.main([str(cfg), "--splits", "2", "--target", "sm8750", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    calls = load_target("sm8750").graph_execute_ns * 2 / 1e6
    assert out["splits"] == 2 and out["execute_ms"] == pytest.approx(calls)
    assert llm_predict.main([str(cfg), "--splits", "0"]) == 1 and "splits must be 1 or more" in capsys.readouterr().err


def test_16_bit_activations_run_hmx_at_the_fitted_share_of_the_8_bit_rate():
    t = load_target("sm8750").with_values(hmx_a16_rate_fraction=0.5)
    assert llm_predict.priced_for(t, "w4a16").hmx_int8_macs_per_cycle == pytest.approx(t.hmx_int8_macs_per_cycle / 2)
    assert llm_predict.priced_for(t, "w8a8") is t and llm_predict.priced_for(t, "float") is t
    c = CONFIGS["llama-3.2-1b"]
    compute_bound = [llm_predict.lm_head_ns(c, "w4a16", 4096, t.with_values(hmx_a16_rate_fraction=x)) for x in (1.0, 0.5)]
    assert compute_bound[1] > 1.9 * compute_bound[0]  # a 4096-token LM head is HMX-bound: about twice as long

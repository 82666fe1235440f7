"""tools/bench/bench_combine.py on the tiny config (hidden 256, 4 heads, 2 KV heads, head_dim 64): deployed layers
(the default) and legacy ones are built, merged and combined, each request's outputs verified on ONNX Runtime
(CPU) and independent of the others'. The real sizes and the simulator run in the benchmark, not here."""

from __future__ import annotations

import json

import onnx
import pytest

from hexfuse.tools.bench import bench_combine
from hexfuse.tools.realsize import CONFIGS

TINY = CONFIGS["tiny"]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HEXFUSE_REALSIZE_CACHE", str(tmp_path / "realsize"))
    return tmp_path / "realsize"


def _verified(row: bench_combine.Measured) -> None:
    assert row.verification and all(v["within"] and v["independent"] for v in row.verification)


def test_deployed_prefill_and_decode_combine_the_mlp_and_say_why_attention_stays(cache):
    row = bench_combine.bench("tiny", 8, [16], "float", iters=2, threads=1, targets=[], timeout_s=60, past=4)
    assert (row.form, row.past, row.label) == ("deployed", 4, "tiny prefill8@KV4 + decode@KV16")
    _verified(row)
    assert all(v["bit_exact"] == v["outputs"] for v in row.verification)
    assert set(row.cpu_ms) == {"apart", "merged", "combined"}
    # o_proj and the MLP are read once; the grouped decode's q/k/v weights are not the prefill's per-head ones
    assert 0 < row.weight_mb["combined"] < row.weight_mb["merged"]
    reasons = " ".join(k["reason"] for k in row.kept_matrix)
    assert "constant input 1 differs" in reasons and "attention" in reasons
    assert list(cache.glob("combine/*.combine.md"))


def test_two_w4a16_decodes_read_every_4bit_weight_once(cache):
    row = bench_combine.bench("tiny", None, [16, 16], "w4a16", iters=0, threads=1, targets=[], timeout_s=60)
    _verified(row)
    assert row.weight_mb["combined"] == pytest.approx(row.weight_mb["merged"] / 2, abs=0.01)
    merged = onnx.load(str(next(cache.glob("combine/*.merged.onnx"))))  # packed as built, not the 8-bit stand-ins
    assert any(t.data_type == onnx.TensorProto.INT4 for t in merged.graph.initializer)


def test_legacy_form_behind_a_flag_and_its_row_says_so(tmp_path, capsys):
    out = tmp_path / "rows.json"
    assert bench_combine.main(["tiny", "--prefill", "8", "--decodes", "16", "--legacy", "--iters", "0",
                               "--json", str(out)]) == 0
    assert "layer form: legacy" in capsys.readouterr().out
    (row,) = json.loads(out.read_text())
    assert row["form"] == "legacy" and row["past"] == 0
    assert all(v["within"] and v["independent"] for v in row["verification"])


def test_past_defaults_to_what_a_deployed_graph_reads_and_is_refused_with_legacy(capsys):
    assert bench_combine.default_past(128) == 3968 and bench_combine.default_past(None) == 0
    assert bench_combine.main(["tiny", "--prefill", "8", "--decodes", "16", "--legacy", "--past", "4"]) == 1
    assert capsys.readouterr().err.strip() == \
        "hexfuse: error: --past and --attention are for the deployed form (drop --legacy)"


def test_requantized_prefill_and_decode_still_combine_o_proj_after_attention(cache):
    # o_proj's input is a chain entry: its QuantizeLinear takes the one encoding the chain's Concat needs
    row = bench_combine.bench("tiny", 8, [16], "w4a16", iters=0, threads=1, targets=[], timeout_s=60, past=4)
    _verified(row)
    assert set(row.requantize_change) == {"prefill", "decode0"}
    assert row.requantized and not [k for k in row.kept_matrix if any("o_proj" in e for e in k["examples"])]

"""End-to-end A/B runs on the CPU EP."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
from ab_testmodels import run_cli

REPORT_KEYS = {"models", "ep", "platform", "simulator", "baselines", "equivalence", "speedups", "headline",
               "assignment", "profiles", "engines", "cycles", "inputs", "raw_latency_ms", "files"}


def test_cpu_tiny_report_has_all_fields(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    out = tmp_path / "rep"
    assert run_cli(["ab", orig, fused, "--iters", "12", "--warmup", "2", "-o", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert REPORT_KEYS <= set(rep)
    assert rep["ep"] == "cpu" and rep["simulator"] is False
    assert rep["equivalence"]["passed"] is True
    assert rep["models"]["fused_op_types"] == ["HexFuse_g0"]
    by_key = {b["key"]: b for b in rep["baselines"]}
    assert by_key["b1_original_seq"]["available"] and by_key["b2_original_best"]["available"]
    assert not by_key["b3_fused_serial"]["available"] and "no fusion spec" in by_key["b3_fused_serial"]["reason"]
    assert by_key["fused_inlined"]["label"].startswith("fused (inlined by ORT")
    for key in ("b1_original_seq", "b2_original_best", "fused_inlined"):
        lat = by_key[key]["latency"]
        assert lat["n"] == 12 and 0 < lat["median_ms"] <= lat["p90_ms"] <= lat["p99_ms"]
    sp = rep["speedups"]["inlined_fused_vs_original_1"]
    assert sp["ci95"][0] <= sp["speedup"] <= sp["ci95"][1]
    assert rep["headline"]["candidate"] == "fused_inlined"
    # equivalence rows carry numbers, and the matmul branch is the matrix engine in the timeline
    row = rep["equivalence"]["runs"]["fused_inlined"]["outputs"][0]
    assert row["max_abs_err"] < 1e-5 and row["cosine"] > 0.9999
    eng = rep["engines"]["b1_original_seq"]["per_engine"]
    assert eng["matrix"]["ops"] == 1 and eng["vector"]["ops"] == 3
    assert all(a["nodes_per_ep"] == {"CPUExecutionProvider": 4} for a in rep["assignment"].values())
    trace = json.loads((out / "trace.json").read_text())["traceEvents"]
    assert {e["pid"] for e in trace} == {1, 2, 3}
    assert {e["args"]["name"] for e in trace if e["name"] == "thread_name"} >= {"matrix", "vector", "dma"}
    assert (out / "latency.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "report.md").read_text()
    assert "PASS" in md and "not baseline 3/4" in md
    assert not list(out.glob(".*tmp*"))  # atomic writes left nothing behind
    assert "equivalence PASS" in capsys.readouterr().err


def test_cpu_equivalence_failure_is_an_error(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    m = onnx.load(fused)
    w = onnx.numpy_helper.to_array(m.graph.initializer[0]) + 0.5
    m.graph.initializer[0].CopyFrom(onnx.numpy_helper.from_array(w, "W"))
    bad = tmp_path / "bad_fused.onnx"
    onnx.save(m, str(bad))
    assert run_cli(["ab", orig, str(bad), "--iters", "3", "--warmup", "0", "-o", str(tmp_path / "r")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("hexfuse: error: fused model differs") and "y1" in err[-1]
    rep = json.loads((tmp_path / "r" / "report.json").read_text())
    assert rep["equivalence"]["passed"] is False  # the report is still written for inspection


def test_cpu_npz_inputs_and_default_report_dir(tiny_pair, tmp_path, monkeypatch):
    orig, fused = tiny_pair
    npz = tmp_path / "in.npz"
    rng = np.random.default_rng(3)
    np.savez(npz, a=rng.random((4, 16), dtype=np.float32), b=rng.random((4, 32), dtype=np.float32))
    here = tmp_path / "here"  # the default report folder is where the user stands, not beside the models
    here.mkdir()
    monkeypatch.chdir(here)
    assert run_cli(["ab", orig, fused, "--inputs", str(npz), "--iters", "3", "--warmup", "0", "-q"]) == 0
    rep = json.loads((here / "fused_ab" / "report.json").read_text())
    assert rep["inputs"]["source"] == str(npz)
    assert not (Path(fused).parent / "fused_ab").exists()


def test_cpu_light_inception(inception_pair, tmp_path):
    orig, fused = inception_pair
    out = tmp_path / "inc"
    assert run_cli(["ab", orig, fused, "--iters", "4", "--warmup", "1", "--profile-runs", "1", "-q",
                    "-o", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["equivalence"]["passed"]
    assert rep["models"]["fused_node_count"] == 1
    tl = rep["engines"]["b1_original_seq"]
    assert tl["per_engine"]["matrix"]["ops"] >= 50  # 57 convs + gemm, profiled as matrix work
    assert tl["per_engine"]["vector"]["ops"] >= 1    # relus, pools and concats (moves run on HVX on HTP)
    assert 0 < tl["ideal_engine_parallel_span"] <= tl["span"]
    assert tl["events_with_known_inputs"] > 100

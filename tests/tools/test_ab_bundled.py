"""hexfuse ab on bundled models fused by the pass: CPU EP and the QNN EP HTP simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ab_testmodels import run_cli

from hexfuse.cli import main as hexfuse

ROOT = Path(__file__).resolve().parents[2]
REPORT_FIELDS = {"models", "ep", "platform", "simulator", "baselines", "equivalence", "speedups", "assignment",
                 "profiles", "engines", "raw_latency_ms", "files"}


def _fuse(name: str, tmp_path: Path) -> tuple[str, str]:
    original = str(ROOT / "models" / name)
    fused = str(tmp_path / name)
    assert hexfuse(["fuse", original, "-o", fused, "--as-designed"]) == 0
    return original, fused


@pytest.mark.parametrize("name", ["googlenet.onnx", "gptj_block.onnx", "llama_prefill_decode.onnx"])
def test_ab_on_cpu_for_bundled_models(tmp_path, name):
    original, fused = _fuse(name, tmp_path)
    assert run_cli(["ab", original, fused, "--ep", "cpu", "--iters", "3", "--warmup", "1", "--quiet",
                    "-o", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert REPORT_FIELDS <= set(report)
    assert report["equivalence"]["passed"]
    for key in ("report.md", "trace.json", "latency.png"):
        assert (tmp_path / "report" / key).stat().st_size > 0


@pytest.mark.parametrize("name", ["googlenet_qdq.onnx", "gptj_block_qdq.onnx"])
def test_ab_on_qnn_htp_simulator_for_bundled_qdq_models(tmp_path, name):
    pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn is not installed")
    original, fused = _fuse(name, tmp_path)
    assert run_cli(["ab", original, fused, "--ep", "qnn", "--qnn-config", "htp_sim", "--iters", "3", "--warmup", "1",
                    "--quiet", "-o", str(tmp_path / "report")]) == 0
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert REPORT_FIELDS <= set(report) and report["simulator"] is True
    assert report["equivalence"]["passed"]
    for run in report["assignment"].values():
        per_ep = run["nodes_per_ep"]
        # Only the graph-boundary Q/DQ the QNN QDQ config leaves in float run on CPU.
        cpu_nodes = [n for n in run["nodes"] if n["ep"] == "CPUExecutionProvider"]
        assert per_ep["QNNExecutionProvider"] > 50
        assert all(n["op_type"] in ("QuantizeLinear", "DequantizeLinear") for n in cpu_nodes), cpu_nodes
    if name == "googlenet_qdq.onnx":  # QDQ-renamed rows (_token_N) map back to their nodes' engines
        for key, run in report["engines"].items():
            engines = {engine: row["ops"] for engine, row in run["per_engine"].items()}
            assert engines.get("other", 0) == 0, (key, engines)
            # 13 convs + the linear layer on HMX; 4 max pools + the mean on HVX
            assert engines["matrix"] >= 14 and engines["vector"] >= 5, (key, engines)

"""`hexfuse analyze --target sm8650` on the bundled LMs: per group what runs on which engine and how, which
source decided (the committed engine map, or the op-type rules), and the gain split into entry merge
and overlap with the part resting on the estimated per-op constants; Markdown and --json agree.

The committed maps hold QNN's schedule, whose replay rejects every group of these small models
(tests/cost/test_replay.py); the estimated path is reached with --ignore-schedule."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from hexfuse.cli import main
from hexfuse.graph_passes.engines.classify import OPTRACE, RULES

ROOT = Path(__file__).resolve().parents[2]
LMS = ["llama_prefill_decode_qdq.onnx", "gptj_block_qdq.onnx"]
_cache: dict[tuple, tuple[dict, str]] = {}


def _analyze(capsys, model: Path, *flags: str) -> tuple[dict, str]:
    key = (str(model), flags)
    if key not in _cache:
        assert main(["analyze", str(model), *flags, "--json"]) == 0
        data = json.loads(capsys.readouterr().out)
        assert main(["analyze", str(model), *flags]) == 0
        _cache[key] = data, capsys.readouterr().out
    return _cache[key]


@pytest.mark.parametrize("name", LMS)
def test_every_group_says_what_runs_where_how_and_who_decided(capsys, name):
    data, markdown = _analyze(capsys, ROOT / "models" / name, "--target", "sm8650", "--ignore-schedule", "--as-designed")
    engines = data["engine_map"]
    assert engines["file"].endswith(f"models/engines/{name.replace('.onnx', '')}.sm8650.json") and engines["htp"]
    assert set(engines["decided_by"]) == {OPTRACE}  # the map covers every compute unit of these models
    assert data["groups"]
    for group in data["groups"]:
        kinds = sorted(task["engine"] for task in group["tasks"])
        assert kinds == ["matrix", "vector"]  # on HTP no task is DMA
        for task in group["tasks"]:
            how = task["engines"]
            assert how["decided_by"] == OPTRACE and how["qnn_today"]
            if task["engine"] == "matrix":
                assert how["runs_on"] == "hmx" and how["how"].startswith("QNN's own ops on HMX")
                # (a MatMul that QNN runs inside a neighbour's op has no op of its own: resource "none")
                assert all(t["resource"] in ("hmx", "none") for t in how["qnn_today"])
            else:
                assert how["runs_on"] == "hvx" and how["how"].startswith("one package task op on the HVX run list")
        split = group["gain_split"]
        assert split["overlap_us"] > 0  # on HTP nothing fuses without predicted overlap
        assert split["saved_us"] == pytest.approx(split["entry_merge_us"] + split["overlap_us"] - split["qnn_prefetch_us"],
                                                  abs=2e-3)
        estimated = split["from_dispatch_us"] + split["from_hvx_launch_us"]
        assert split["from_dispatch_us"] == pytest.approx(
            split["dispatch_ns"] * (split["ops"][0] - split["ops"][1]) / 1e3, abs=1e-3)
        assert split["estimated_share"] == pytest.approx(estimated / split["saved_us"], abs=2e-3)
    assert "## Engines and gain per fused group" in markdown and "rests on these estimates" in markdown
    assert f"engine map {engines['file']}" in markdown and "move on HVX" in markdown


def test_lm_gains_rest_mostly_on_the_estimated_constants_where_vector_chains_merge(capsys):
    data, _ = _analyze(capsys, ROOT / "models" / "llama_prefill_decode_qdq.onnx", "--target", "sm8650", "--ignore-schedule", "--as-designed")
    shares = [g["gain_split"]["estimated_share"] for g in data["groups"]]
    merged = [g for g in data["groups"] if g["gain_split"]["ops"][0] > g["gain_split"]["ops"][1]]
    assert merged and all(g["gain_split"]["estimated_share"] > 0.5 for g in merged)
    assert min(shares) >= 0.0


def test_without_a_map_the_rules_decide_and_the_report_says_so(capsys):
    data, markdown = _analyze(capsys, ROOT / "models" / "gptj_block_qdq.onnx", "--target", "sm8550", "--as-designed")
    assert data["engine_map"]["file"] is None and set(data["engine_map"]["decided_by"]) == {RULES}
    assert "no engine map for target sm8550" in data["engine_map"]["note"] and "hexfuse engines" in data["engine_map"]["note"]
    assert all(task["engines"]["decided_by"] == RULES for g in data["groups"] for task in g["tasks"])
    assert all(task["engine"] != "dma" for g in data["groups"] for task in g["tasks"])


def test_allow_merge_only_fuses_at_least_as_much(capsys):
    model = ROOT / "models" / "llama_prefill_decode_qdq.onnx"
    strict, _ = _analyze(capsys, model, "--target", "sm8650", "--ignore-schedule", "--as-designed")
    loose, _ = _analyze(capsys, model, "--target", "sm8650", "--ignore-schedule", "--as-designed", "--allow-merge-only")
    assert loose["allow_merge_only"] and not strict["allow_merge_only"]
    assert len(loose["groups"]) >= len(strict["groups"])
    merge_only = [r for r in (t["reason"] for t in strict["not_fused"]["tasks"]) if "merge only: " in r]
    assert all("--allow-merge-only" in r for r in merge_only)


def test_an_engine_map_of_another_model_is_a_one_line_error(tmp_path, capsys):
    other = ROOT / "models" / "engines" / "googlenet_qdq.sm8650.json"
    code = main(["analyze", str(ROOT / "models" / "gptj_block_qdq.onnx"), "--target", "sm8650", "--engines", str(other)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and "made from googlenet_qdq.onnx" in err[0]


def test_an_explicit_map_decides_for_a_copy_of_the_model(tmp_path, capsys):
    model = tmp_path / "copy.onnx"
    shutil.copy(ROOT / "models" / "gptj_block_qdq.onnx", model)
    assert main(["analyze", str(model), "--target", "sm8650", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine_map"]["file"] is None  # no map beside the copy
    given = ROOT / "models" / "engines" / "gptj_block_qdq.sm8650.json"
    assert main(["analyze", str(model), "--target", "sm8650", "--json", "--engines", str(given)]) == 0
    assert json.loads(capsys.readouterr().out)["engine_map"]["file"] == str(given)

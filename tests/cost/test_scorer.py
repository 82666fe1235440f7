"""CostScorer inside the real pass on bundled light models, and the report files it feeds."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import onnx
import pytest

from hexfuse.graph_passes import pipeline
from hexfuse.graph_passes.cost import CostScorer, load_target
from hexfuse.graph_passes.cost.cli import render_cost_markdown, scorer_for, write_cost_reports
from tests.passes import analyze_model
from tests.cost.specs import fused, matmul_task, vector_task

LIGHT = Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"
BASELINES = ("t1_serial", "t2_best_existing", "t3_fused_serial", "t4_fused_concurrent")


@pytest.fixture(scope="module")
def inception():
    scorer = CostScorer(load_target("sm8550"), 0.1, as_designed=True)
    # the host executor: on HTP the Conv + folded Relu tasks wait for a QNN translation of the Relu
    return scorer, pipeline.analyze_model(LIGHT / "light_inception_v1.onnx", scorer, None)


def test_pass_fuses_only_groups_that_clear_the_margin(inception):
    scorer, result = inception
    assert result.selection.groups, "inception_v1 has independent conv and pool branches"
    for group in result.selection.groups:
        verdict = group.verdict
        assert verdict.accepted and verdict.gain >= 0.1
        assert all(key in verdict.details for key in BASELINES)
        d = verdict.details
        assert d["t4_fused_concurrent"] < d["t2_best_existing"] <= d["t1_serial"]
        assert d["entry_merge_gain"] + d["overlap_gain"] == pytest.approx(d["gain_vs_serial"], abs=2e-4)
        assert any(key.endswith(".hvx_contexts") for key in d)
    rejected = [r for r in result.selection.reasons.values() if "scorer" in r]
    assert rejected and all(scorer.name in r for r in rejected)


def test_negative_control_fuses_nothing():
    result = analyze_model(LIGHT / "light_bvlc_alexnet.onnx", scorer=CostScorer(load_target("sm8650"), 0.1, as_designed=True))
    assert not result.fused_ops


def test_scoring_is_cached_and_fast():
    scorer = CostScorer(load_target("sm8750"), 0.1, as_designed=True)
    ops = [fused(matmul_task(f"m{i}", 256, 512, 512), vector_task(f"v{i}", (512, 256 + 32 * i), "Softmax"))
           for i in range(20)]
    start = time.perf_counter()
    first = [scorer.score(op) for op in ops]
    cold = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(50):
        again = [scorer.score(op) for op in ops]
    warm = (time.perf_counter() - start) / 50
    assert again == first
    assert cold / len(ops) < 0.05  # < 50 ms per new group, quota search included
    assert warm / len(ops) < 1e-3  # repeated groups come from the cache


def test_reports_trace_png_and_markdown(inception, tmp_path):
    scorer, result = inception
    paths = write_cost_reports(result.fused_ops, scorer, tmp_path / "out", plot=True)
    assert [p.name for p in paths] == ["out.timeline.json", "out.timeline.png"]
    trace = json.loads(paths[0].read_text())
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e.get("name") == "thread_name"}
    assert {"1 original serial", "4 fused concurrent/hmx", "3 fused serial/hmx"} <= tracks
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in slices)
    assert len({e["pid"] for e in slices}) == len(result.fused_ops)  # one process per op type
    listed = [e["args"] for e in trace["traceEvents"] if e.get("name") == "instances"]
    assert sorted(n for entry in listed for n in entry["fused_nodes"]) == sorted(n.node_name for n in result.fused_nodes)
    assert paths[1].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == ["out.timeline.json", "out.timeline.png"]  # no temp files left
    table = render_cost_markdown(result.fused_ops, "sm8550")
    rows = [line for line in table.splitlines() if line.startswith("| `HexFuse")]
    assert len(rows) == len(result.fused_ops)


def test_trace_is_compact_and_the_png_is_drawn_only_when_asked(inception, tmp_path):
    scorer, result = inception
    paths = write_cost_reports(result.fused_ops, scorer, tmp_path / "out")
    assert [p.name for p in paths] == ["out.timeline.json"]
    text = paths[0].read_text()
    assert text == json.dumps(json.loads(text), separators=(",", ":")) + "\n"  # one line, no padding


def test_scorer_for_names_and_paths():
    assert scorer_for("v73", 0.2, as_designed=True).target.name == "sm8550"
    assert scorer_for("v73", 0.2, as_designed=True).min_gain == 0.2


def test_min_overlap_separates_engine_overlap_from_entry_merging():
    op = fused(matmul_task("m", 512, 512, 512), vector_task("v", (512, 2048), "Softmax"))
    target = load_target("sm8550")
    plain = CostScorer(target, min_gain=0.0, as_designed=True).score(op)
    assert plain.accepted and plain.details["overlap_gain"] > 0.05
    strict = CostScorer(target, min_gain=0.0, min_overlap=plain.details["overlap_gain"] + 0.01, as_designed=True).score(op)
    assert not strict.accepted and "little overlap" in strict.reason
    assert CostScorer(target, min_gain=0.0, min_overlap=plain.details["overlap_gain"] - 0.01, as_designed=True).score(op).accepted


# --- the fused node priced as the generated package builds it (the default) ---------------------------
def test_the_package_as_built_adds_what_the_replay_prices_to_both_fused_runs():
    """Entry, joins, ports in main memory and QNN's copies: replay.expansion of the group's bytes, on the
    critical path of t3 and t4; the estimated baselines of the tasks themselves are unchanged."""
    from hexfuse.graph_passes.cost.replay import expansion
    from hexfuse.graph_passes.cost.schedule_verdict import group_of

    target = load_target("sm8650")
    op = fused(matmul_task("m", 1024, 2048, 2048), vector_task("v", (2048, 2048), "Softmax"))
    built, designed = CostScorer(target, 0.1).predict(op), CostScorer(target, 0.1, as_designed=True).predict(op)
    package = expansion(target, group_of(op)).total_ns
    assert package > 2 * target.qnn_op_ns  # an entry and a join at least, plus bytes
    assert built.package_ns == package and designed.package_ns == 0.0
    assert built.t3_fused_serial - designed.t3_fused_serial == pytest.approx(package)
    assert built.t4_fused_concurrent - designed.t4_fused_concurrent == pytest.approx(package)
    assert (built.t1_serial, built.t2_best_existing) == (designed.t1_serial, designed.t2_best_existing)
    assert built.fused_overhead_ns - designed.fused_overhead_ns == pytest.approx(package)


def test_a_group_that_clears_the_margin_only_as_designed_says_what_the_package_adds():
    target = load_target("sm8650")
    op = fused(matmul_task("m", 64, 256, 256), vector_task("v", (256, 256), "Softmax"))
    designed = CostScorer(target, 0.1, as_designed=True).score(op)
    built = CostScorer(target, 0.1).score(op)
    assert designed.accepted and not built.accepted
    assert built.reason.startswith("package: holding the group together adds ")
    assert "--as-designed" in built.reason and built.details["package_ns"] > 0


def test_without_matrix_work_on_hmx_the_package_has_nothing_to_overlap():
    """Every task but the matrix work is an HVX-thread package op on HTP, a DMA task too."""
    from tests.cost.specs import dma_task

    target = load_target("sm8550")
    op = fused(vector_task("v", (2048, 1024), "Softmax"), dma_task("d", (2048, 1024)))
    built = CostScorer(target, 0.0, allow_merge_only=True).score(op)
    assert not built.accepted and built.reason.startswith("no HMX work: ")
    assert not CostScorer(target, 0.0, allow_merge_only=True, as_designed=True).score(op).reason.startswith("no HMX")


@pytest.mark.parametrize("target", ["sm8550", "sm8650"])
def test_the_defaults_fuse_no_bundled_model_and_the_design_fuses_some(target):
    """What the simulator's fused graphs and the replay showed (docs/where-it-pays.md), now the estimated
    model's answer too; as designed, the same candidates are fused (the mechanics the other tests use)."""
    models = sorted((Path(__file__).resolve().parents[2] / "models").glob("*.onnx"))
    designed = 0
    for path in models:
        built = hexfuse_analyze(path, CostScorer(load_target(target), 0.1, use_schedule=False))
        assert not built.fused_ops, path.name
        designed += len(hexfuse_analyze(path, CostScorer(load_target(target), 0.1, use_schedule=False,
                                                         as_designed=True)).fused_ops)
    assert designed > 0


def hexfuse_analyze(path: Path, scorer: CostScorer):
    import hexfuse

    return hexfuse.analyze_model(path, scorer)

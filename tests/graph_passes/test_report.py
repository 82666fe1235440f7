"""Reports a performance engineer can trace back to the model: file node names, totals that add up,
and `analyze --json` carrying everything the Markdown says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import onnx
import pytest

from tests.passes import analyze_model
from hexfuse.cli import main
from hexfuse.graph_passes.cost.target import target_to_dict
from tests.cost.specs import estimated
from hexfuse.graph_passes import pipeline
from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.report.document import render_report
from hexfuse.graph_passes.report.outputs import analysis_report
from hexfuse.graph_passes.select.balance import BalanceScorer
from tests import builders

_LABEL = re.compile(r"^(?:(?P<op>\w+) '(?P<name>.*)'|#(?P<index>\d+) (?P<op2>\w+))(?: \(copy\))?$")


def _in_file(label: str, file: onnx.GraphProto) -> bool:
    """A label names a node the user can find: by its name, or by index and op type where unnamed."""
    match = _LABEL.match(label)
    if not match:
        return False
    if match["index"] is not None:
        node = file.node[int(match["index"])]
        return node.op_type == match["op2"] and not node.name
    return any(n.name == match["name"] and n.op_type == match["op"] for n in file.node)


@pytest.fixture(scope="module")
def inception():
    path = builders.light_model("inception_v2")
    scorer = scorer_for("sm8550", 0.1, as_designed=True)
    # the host executor: on HTP these groups wait for a QNN translation of the folded Relu (op_package/qnn_ops.py)
    return onnx.load(path).graph, analysis_report(pipeline.analyze_model(path, scorer, None), scorer, "analysis")


def test_every_group_names_nodes_of_the_file(inception):
    file, data = inception
    labels = [name for group in data["groups"] for task in group["tasks"] for name in (*task["compute_ops"], *task["folded"])]
    assert any(task["folded"] for group in data["groups"] for task in group["tasks"])  # BatchNormalization after Conv
    assert labels and all(_in_file(label, file) for label in labels), [x for x in labels if not _in_file(x, file)][:3]
    assert data["model"]["nodes_in_file"] == len(file.node) == 916
    assert data["model"]["opset_upgraded_from"] == 9
    assert data["model"]["nodes_analysed"] == 916 + data["model"]["nodes_added_by_upgrade"]


def test_totals_add_up_on_one_denominator(inception):
    _, data = inception
    summary = data["summary"]
    assert summary["fused_us"] == pytest.approx(summary["serial_us"] - summary["entry_merge_us"] - summary["overlap_us"], abs=1e-2)
    assert summary["total_gain"] == pytest.approx(summary["entry_merge_gain"] + summary["overlap_gain"], abs=1e-5)
    saved = sum(g["t1_us"] - g["t4_us"] for g in data["groups"])
    assert summary["saved_us"] == pytest.approx(saved, rel=1e-3)
    for group in data["groups"]:  # per group, both gains share the serial time t1 as denominator
        assert group["entry_merge_gain"] + group["overlap_gain"] == pytest.approx(1 - group["t4_us"] / group["t1_us"], abs=2e-3)


def test_markdown_says_what_the_data_says(inception):
    _, data = inception
    text = render_report(data)
    assert "916 nodes in the file" in text and "Total gain" in text
    for group in data["groups"]:
        assert f"`{group['fused_node']}`" in text
    assert text.count("| `hexfuse/") == len(data["groups"])


def test_analyze_json_carries_times_split_target_and_reasons(capsys, tmp_path):
    target = tmp_path / "sm8550.json"  # the pre-fit figures, under which googlenet_qdq has groups that pay
    target.write_text(json.dumps(target_to_dict(estimated("sm8550"))))
    assert main(["analyze", str(Path(__file__).resolve().parents[2] / "models" / "googlenet_qdq.onnx"), "--json",
                 "--target", str(target), "--as-designed"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["target"] == "sm8550" and data["summary"]["serial_us"] > 0
    group = data["groups"][0]
    assert {"t1_us", "t2_us", "t3_us", "t4_us", "entry_merge_gain", "overlap_gain", "reason", "gain"} <= group.keys()
    assert data["op_types"][0]["quota"]
    assert data["not_fused"]["tasks"] and all(t["reason"] for t in data["not_fused"]["tasks"])
    assert data["not_fused"]["by_kind"][0]["example"]


def test_qdq_groups_are_named_by_their_compute_op():
    path = Path(__file__).resolve().parents[2] / "models" / "gptj_block_qdq.onnx"
    scorer = scorer_for("sm8550", 0.1, as_designed=True)
    data = analysis_report(analyze_model(path, scorer), scorer, "analysis")
    assert data["groups"]
    for group in data["groups"]:
        for task in group["tasks"]:
            if task["units"] > 1 or task["nodes"] > 1:  # a lone Q or DQ task is named by itself
                assert not any(name.startswith(("DequantizeLinear", "QuantizeLinear")) for name in task["compute_ops"]), task


def test_a_scorer_without_a_cost_model_reports_no_times(tmp_path):
    path = builders.save(builders.two_branch(96), tmp_path / "m.onnx")
    scorer = BalanceScorer(min_gain=0.0)
    data = analysis_report(analyze_model(path, scorer), scorer, "analysis")
    assert data["summary"] is None and data["groups"][0]["t1_us"] is None
    assert "| - | - | - |" in render_report(data)


@pytest.mark.parametrize("flags, priced", [
    ([], "priced as the generated package builds them"),
    (["--as-designed"], "priced as designed (--as-designed"),
    (["--as-designed", "--target", "sm8650"], "priced as the generated package builds them"),  # the replay decides
])
def test_the_report_says_how_fused_nodes_were_priced(capsys, flags, priced):
    model = Path(__file__).resolve().parents[2] / "models" / "gptj_block_qdq.onnx"
    assert main(["analyze", str(model), *flags]) == 0
    assert f"- fused nodes {priced}" in capsys.readouterr().out

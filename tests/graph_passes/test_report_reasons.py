"""Reports that neither hide nor contradict (issue 45): every refused task is counted under a reason kind,
per-node reasons group by kind, and the lines a new user met contradicting each other now agree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hexfuse.cli import main
from hexfuse.graph_passes.cost.scorer import _saves
from hexfuse.graph_passes.report.document import (
    MAX_KINDS, _not_fused_table, _untranslated_folds, reason_kind, render_report,
)
from tests import builders

MODELS = Path(__file__).resolve().parents[2] / "models"


def _analyze(capsys, *argv: str) -> tuple[str, str]:
    assert main(["analyze", *map(str, argv)]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


@pytest.fixture(scope="module")
def inception_v1() -> Path:
    return Path(builders.light_model("inception_v1"))


@pytest.mark.parametrize("reason, kind", [
    ("on HTP the matrix work must run on QNN's own ops: Relu 'n1' has no QNN translation in hexfuse",
     "on HTP the matrix work must run on QNN's own ops: Relu has no QNN translation in hexfuse"),
    ("on HTP the matrix work must run on QNN's own ops: Conv \"it's\" is grouped (QNN expresses it as another op)",
     "on HTP the matrix work must run on QNN's own ops: Conv is grouped (QNN expresses it as another op)"),
    ("#12 DequantizeLinear (copy) reads quantized 'q_out' without a DequantizeLinear of its own",
     "DequantizeLinear reads quantized '…' without a DequantizeLinear of its own"),
    ("the op package cannot plan it: node 'n139' (Dropout): the mask output of Dropout is not supported",
     "the op package cannot plan it: a Dropout node: the mask output of Dropout is not supported"),
    ("best partner rejected by cost[sm8550] scorer: package: holding the group together adds 20.66 us (...)",
     "partner rejected by the scorer (not worth fusing): package: holding the group together adds"),
    ("best partner rejected by cost[sm8650] scorer: overheads: predicted gain 8.3% < margin 10%",
     "partner rejected by the scorer (not worth fusing): overheads: predicted gain"),
])
def test_a_reason_kind_names_no_node_and_no_figure(reason: str, kind: str) -> None:
    assert reason_kind(reason) == kind


def test_every_refused_task_is_counted_under_a_kind(inception_v1: Path, capsys) -> None:
    out, _ = _analyze(capsys, inception_v1, "--json")
    data = json.loads(out)
    not_fused = data["not_fused"]
    assert not_fused["total"] == len(not_fused["tasks"]) == sum(k["tasks"] for k in not_fused["by_kind"]) == 60
    relu = [k for k in not_fused["by_kind"] if k["kind"].endswith("Relu has no QNN translation in hexfuse")]
    assert len(relu) == 1 and relu[0]["tasks"] > 12  # one row, where one row per Relu filled the old table
    assert len(relu[0]["task_labels"]) == relu[0]["tasks"]
    text = render_report(data)
    rows = [line for line in text.split("## Not fused")[1].splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) - 1 == len(not_fused["by_kind"])  # (the header row) every kind has its row
    assert "60 tasks, by reason" in text


def test_past_the_row_limit_one_row_counts_what_is_left() -> None:
    kinds = [{"kind": f"kind {i}", "tasks": 2, "example": f"task {i}: why", "task_labels": [f"a{i}", f"b{i}"]}
             for i in range(MAX_KINDS + 5)]
    lines = _not_fused_table({"by_kind": kinds, "total": 2 * len(kinds), "tasks": None})
    assert "| … 5 more reason kinds | 10 |" in "\n".join(lines)
    assert sum(1 for line in lines if line.startswith("| kind ")) == MAX_KINDS


def test_the_header_says_how_many_tasks_fused_and_why_folded_relus_are_refused(inception_v1: Path, capsys) -> None:
    out, _ = _analyze(capsys, inception_v1)
    assert "fusable of" not in out
    assert "- tasks: 60, of which 60 hold matrix, vector or DMA work a group could pair; fused: 0; not fused: 60" in out
    header = next(line for line in out.splitlines() if line.startswith("- target:"))
    assert "Relu" in header and "cannot yet hand a matrix op with a folded Relu to QNN" in header


def test_folds_without_a_qnn_translation_are_read_from_reasons_whatever_names_the_node() -> None:
    reasons = {1: "on HTP the matrix work must run on QNN's own ops: #12 Relu has no QNN translation in hexfuse",
               2: "on HTP the matrix work must run on QNN's own ops: Sigmoid 'a b' has no QNN translation in hexfuse",
               3: "on HTP the matrix work must run on QNN's own ops: Tanh 't' has no QNN translation in hexfuse"}
    assert _untranslated_folds(["Add", "Relu", "Sigmoid"], reasons) == ["Relu", "Sigmoid"]  # Tanh: not a fold here


def test_a_fused_node_slower_than_today_costs_more_and_saves_nothing(capsys) -> None:
    assert _saves(0.139) == "saves 13.9%" and _saves(-3.576) == "costs 357.6% more"
    out, _ = _analyze(capsys, MODELS / "gptj_block.onnx", "--json")
    assert "saves -" not in out and "costs 357.6% more" in out


def test_beside_the_replay_the_report_says_which_time_to_believe(capsys) -> None:
    out, _ = _analyze(capsys, MODELS / "gptj_block_qdq.onnx", "--target", "sm8650")
    assert "### QNN's own schedule, replayed" in out
    assert "Two times for the original model" in out and "Believe the replay" in out


def test_the_engines_hint_names_the_model_as_the_user_gave_it(tmp_path: Path, monkeypatch, capsys) -> None:
    folder = tmp_path / "my models"
    folder.mkdir()
    (folder / "two.onnx").write_bytes(Path(builders.save(builders.two_branch(96), tmp_path / "m.onnx")).read_bytes())
    monkeypatch.chdir(tmp_path)
    out, _ = _analyze(capsys, "my models/two.onnx")
    assert "`hexfuse engines 'my models/two.onnx' --target sm8550` makes one" in out


@pytest.mark.parametrize("model, said", [
    ("gptj_block", "priced as designed (--as-designed, a what-if"),  # it would fuse: say how many
    ("moe_layer", "priced as designed (--as-designed) none pays either (most often: "),  # it would not
])
def test_as_designed_is_offered_only_where_it_fuses(capsys, model: str, said: str) -> None:
    _, err = _analyze(capsys, MODELS / f"{model}.onnx")
    assert said in err
    if "none pays" not in said:
        assert main(["analyze", str(MODELS / f"{model}.onnx"), "--as-designed", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["groups"]


def test_fuse_says_nothing_of_progress_before_an_error_on_its_input(tmp_path: Path, capsys) -> None:
    for missing in (tmp_path / "nope.onnx", tmp_path):
        assert main(["fuse", str(missing), "-o", str(tmp_path / "out.onnx")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("hexfuse: error: ") and "fusing" not in err, err

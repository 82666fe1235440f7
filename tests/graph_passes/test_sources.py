"""Every fused group says where its tasks came from: branch, micro-batch or request (spec and report)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.passes import fuse_model
from hexfuse.graph_passes.analysis.sources import BRANCH, REQUEST, SOURCES, Sources
from hexfuse.graph_passes.report.document import render_report
from hexfuse.graph_passes.report.outputs import analysis_report
from hexfuse.graph_passes.select.balance import BalanceScorer
from hexfuse.graph_passes.spec.model import FusionSpec

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


@pytest.fixture(scope="module")
def llama_pair():
    # the balance scorer: where tasks come from is under test, not whether they pay (with the cost model
    # on HTP only the prefill || decode groups are predicted to overlap, so no branch group would fuse)
    return fuse_model(MODELS / "llama_prefill_decode.onnx", BalanceScorer(min_gain=0.1))


def test_single_request_models_fuse_branches_only():
    result = fuse_model(MODELS / "gptj_block.onnx")
    assert result.spec.fused_ops and {op.source for op in result.spec.fused_ops} == {BRANCH}


def test_requests_built_into_one_graph_are_found_without_metadata(llama_pair):
    """No merge metadata: the prefill and decode cones share nothing but weights, so they are requests."""
    analyzed = llama_pair.analyzed
    sources = Sources(analyzed.prepared, analyzed.analysis)
    kinds = [op.source for op in llama_pair.spec.fused_ops]
    assert set(kinds) <= set(SOURCES) and REQUEST in kinds and BRANCH in kinds
    for node in analyzed.fused_nodes:  # a shared op type's spec carries its first instance's source
        parts = {sources.task_part(task).request for task in node.group.tasks}
        assert parts <= {"prefill_input_ids", "decode_input_ids"}
        assert (sources.kind(node.group.tasks) == REQUEST) == (len(parts) == 2), (node.node_name, parts)


def test_report_and_spec_name_the_source(llama_pair, tmp_path):
    report = render_report(analysis_report(llama_pair.analyzed, BalanceScorer(min_gain=0.0), "x"))
    assert "| source |" in report and "| request: " in report and "| branch |" in report
    text = llama_pair.spec.to_json()
    assert FusionSpec.from_json(text) == llama_pair.spec
    older = json.loads(text)
    for op in older["fused_ops"]:
        del op["source"]  # a spec written before the field existed
    assert {op.source for op in FusionSpec.from_json(json.dumps(older)).fused_ops} == {BRANCH}

"""The partner search's second pass (analysis/candidates.py): where the check of every accepted pair at
once reports a buffer hazard, the search runs again asking ``hazard`` pair by pair. On a well-formed
graph no independent pair has a hazard, so that pass finds the same candidates; a pair ``hazard``
refuses is left out."""

from __future__ import annotations

import pytest

from hexfuse.graph_passes.analysis import candidates
from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.load.model import load_model
from tests.builders import bundled_or_lm


def _analysis(path) -> Analysis:
    loaded = load_model(path)
    return Analysis.of(loaded.model, typed=loaded.inferred.graph)


@pytest.mark.parametrize("name", ["gptj_block_qdq", "llama_prefill_decode", "lm"])
def test_pair_by_pair_pass_finds_the_same_candidates(name, tmp_path, monkeypatch):
    path = bundled_or_lm(tmp_path, name)
    first = candidates.find_candidates(_analysis(path))
    assert first.pairs
    monkeypatch.setattr(candidates, "any_hazard", lambda *args: True)
    assert candidates.find_candidates(_analysis(path)) == first


def test_a_pair_with_a_hazard_is_refused(tmp_path, monkeypatch):
    path = bundled_or_lm(tmp_path, "lm")
    first = candidates.find_candidates(_analysis(path))
    refused = first.pairs[0]
    analysis = _analysis(path)
    tasks = analysis.tasks

    def hazard(a, b, names):  # the buffers of the refused pair's tasks, in either order
        pair = {id(a), id(b)}
        return "RAW hazard (test)" if pair == {id(analysis.buffers(tasks[refused.first])),
                                               id(analysis.buffers(tasks[refused.second]))} else None

    monkeypatch.setattr(candidates, "any_hazard", lambda *args: True)
    monkeypatch.setattr(candidates, "hazard", hazard)
    second = candidates.find_candidates(analysis)
    assert refused not in second.pairs
    assert refused.second not in second.partners[refused.first]

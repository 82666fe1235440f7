"""Buffer hazards (analysis/hazards.py): the check of many pairs at once against the pair-by-pair
check, on real models and on pairs with and without a hazard (neighbours in a chain read what the
other writes; pairs far apart share nothing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.hazards import any_hazard, hazard
from hexfuse.graph_passes.load.model import load_model

MODELS = Path(__file__).resolve().parents[2] / "models"


@pytest.mark.parametrize("name", ["gptj_block_qdq", "llama_prefill_decode", "googlenet"])
def test_many_pairs_at_once_agree_with_each_pair(name):
    loaded = load_model(MODELS / f"{name}.onnx")
    analysis = Analysis.of(loaded.model, typed=loaded.inferred.graph)
    tasks = [task for task in analysis.tasks if task.fusable]
    nodes = analysis.task_node_arrays(tasks)
    assert [list(nodes[1][a:b]) for a, b in zip(nodes[0], nodes[0][1:])] == [analysis.task_nodes(t) for t in tasks]
    pairs = [(i, j) for i in range(len(tasks)) for j in range(i + 1, min(len(tasks), i + 6))]
    expected = [hazard(analysis.buffers(tasks[i]), analysis.buffers(tasks[j]), analysis.flat.names) is not None
                for i, j in pairs]
    assert any(expected) and not all(expected)  # both kinds are present
    for (i, j), conflict in zip(pairs, expected):
        assert any_hazard(analysis.flat, analysis.buffer_map, nodes, [(i, j)]) is conflict, (i, j)
        assert any_hazard(analysis.flat, analysis.buffer_map, nodes, [(j, i)]) is conflict, (j, i)
    clean = [pair for pair, conflict in zip(pairs, expected) if not conflict]
    assert not any_hazard(analysis.flat, analysis.buffer_map, nodes, clean)
    assert any_hazard(analysis.flat, analysis.buffer_map, nodes, clean + [pairs[expected.index(True)]])
    assert not any_hazard(analysis.flat, analysis.buffer_map, nodes, [])

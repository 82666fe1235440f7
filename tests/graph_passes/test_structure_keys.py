"""Structure keys computed for many tasks at once (analysis/structure.py ``prepare``, array processing)
against a plain per-task reading of the same definition: equal keys exactly for equal structure, and the
task boundary of the general node-set function (the one the spec builder uses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hexfuse.graph_passes.analysis import structure
from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.load.model import load_model
from hexfuse.tools.synthetic import stacked_lm

MODELS = Path(__file__).resolve().parents[2] / "models"


def _reference_key(analysis: Analysis, task) -> tuple:
    """The task key as the module docstring defines it, one task at a time."""
    flat, structures = analysis.flat, analysis.structures
    body = analysis.task_body(task).body
    local: dict[int, int] = {}
    rows = [(flat.op_types[i], flat.domains[i], tuple(a.SerializeToString() for a in flat.node(i).attribute),
             tuple(local.setdefault(t, len(local)) if t >= 0 else -1 for t in flat.inputs[i]),
             tuple(local.setdefault(t, len(local)) if t >= 0 else -1 for t in flat.outputs[i]))
            for i in body]
    ins, outs = structure.boundary(analysis, body)
    return (task.engine, tuple(rows), tuple(structures._signatures[t] for t in local),
            tuple(local[t] for t in ins), tuple(local[t] for t in outs))


def _partition(keys: list) -> list[list[int]]:
    classes: dict[object, list[int]] = {}
    for position, key in enumerate(keys):
        classes.setdefault(key, []).append(position)
    return sorted(classes.values())


@pytest.mark.parametrize("source", ["gptj_block_qdq", "llama_prefill_decode", "googlenet_qdq", "moe_layer", "lm"])
def test_batched_keys_group_tasks_as_the_definition_does(tmp_path, source):
    if source == "lm":
        path = tmp_path / "lm.onnx"
        path.write_bytes(stacked_lm(6, 16).SerializeToString())
    else:
        path = MODELS / f"{source}.onnx"
    loaded = load_model(path)
    analysis = Analysis.of(loaded.model, typed=loaded.inferred.graph)
    tasks = list(analysis.tasks)
    analysis.structures.prepare(tasks[::2])  # two batches and single tasks must agree with one another
    analysis.structures.prepare(tasks)
    batched = [analysis.structures.task(task) for task in tasks]
    reference = [_reference_key(analysis, task) for task in tasks]
    assert len(set(reference)) < len(tasks) or source == "googlenet_qdq"  # the models repeat structure
    assert _partition(batched) == _partition(reference)
    for task in tasks:
        assert analysis.structures.boundary(task) == structure.boundary(analysis, analysis.task_body(task).body)


def test_one_task_at_a_time_gives_the_batched_key(tmp_path):
    path = tmp_path / "lm.onnx"
    path.write_bytes(stacked_lm(3, 16).SerializeToString())
    loaded = load_model(path)
    batched = Analysis.of(loaded.model, typed=loaded.inferred.graph)
    single = Analysis.of(loaded.model, typed=loaded.inferred.graph)
    batched.structures.prepare(batched.tasks)
    keys = [batched.structures.task(task) for task in batched.tasks]
    alone = [single.structures.task(task) for task in single.tasks]  # each prepared on first use
    assert _partition(keys) == _partition(alone)

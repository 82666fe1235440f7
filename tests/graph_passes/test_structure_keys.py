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
from tests.builders import bundled_or_lm

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
    loaded = load_model(bundled_or_lm(tmp_path, source))
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


def _reference_code(analysis: Analysis, task) -> tuple:
    """The code key as ``Structures.codes`` defines it, one task at a time: the task key, each bakeable
    tensor's number and baked value, each port's encoding."""
    from hexfuse.graph_passes.spec.builder import port_wire

    flat, structures = analysis.flat, analysis.structures
    body = analysis.task_body(task).body
    local: dict[int, int] = {}
    for index in body:
        for tensor in (*flat.inputs[index], *flat.outputs[index]):
            if tensor >= 0:
                local.setdefault(tensor, len(local))
    baked = tuple((number, structures._baked(tensor)) for tensor, number in local.items() if structures._may_bake[tensor])
    ins, outs = structure.boundary(analysis, body)
    wires = ((tuple(port_wire(analysis, t, True) for t in ins), tuple(port_wire(analysis, t, False) for t in outs))
             if analysis.has_qdq else ())
    return structures.task(task), baked, wires


@pytest.mark.parametrize("source", ["gptj_block_qdq", "googlenet_qdq", "llama_prefill_decode_qdq", "lm"])
def test_batched_codes_group_tasks_as_the_definition_does(tmp_path, source):
    loaded = load_model(bundled_or_lm(tmp_path, source))
    analysis = Analysis.of(loaded.model, typed=loaded.inferred.graph)
    tasks = [task for task in analysis.tasks if task.fusable]
    codes = analysis.structures.codes(tasks[::3]) and analysis.structures.codes(tasks)  # two calls must agree
    reference = [_reference_code(analysis, task) for task in tasks]
    assert 1 < len(set(reference)) and (len(set(reference)) < len(tasks) or source != "lm")  # the LM repeats
    assert _partition(codes) == _partition(reference)
    assert analysis.structures.codes(tasks[:1] * 2) == [codes[0]] * 2  # a task asked twice


def test_rows_are_interned_exactly_when_hashes_collide(monkeypatch):
    import numpy as np

    monkeypatch.setattr(structure, "_row_hashes", lambda block: np.zeros(len(block), dtype=np.uint64))
    loaded = load_model(MODELS / "gptj_block_qdq.onnx")
    structures = Analysis.of(loaded.model, typed=loaded.inferred.graph).structures
    values = np.array([1, 2, 3, 1, 2, 3, 3, 2, 1, 7], dtype=np.int64)
    ids = structures._intern_rows("test", values, np.array([0, 3, 6, 9, 10, 10]))
    assert ids[0] == ids[1] != ids[2] and len({ids[0], ids[2], ids[3], ids[4]}) == 4

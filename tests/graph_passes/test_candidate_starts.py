"""The partner window's bitsets (analysis/candidates.py ``_Starts``, packed with numpy; every task's
own window at once) against their definition walked task by task: bit k of ``after(engine, lo)`` is set
exactly when position lo + 1 + k is the first unit of a fusable task of another engine."""

from __future__ import annotations

import numpy as np
import pytest

from hexfuse.graph_passes.analysis.candidates import PARTNER_WINDOW, _Starts
from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.hazards import _intersect
from hexfuse.graph_passes.engines.classify import Engine
from hexfuse.graph_passes.load.model import load_model
from tests.builders import bundled_or_lm


def _walked(tasks, engine: Engine, lo: int) -> int:
    starts = {task.units[0]: task.engine for task in tasks}
    bits = 0
    for k in range(PARTNER_WINDOW):
        other = starts.get(lo + 1 + k)
        if other is not None and other is not engine:
            bits |= 1 << k
    return bits


def _check(tasks, count: int) -> None:
    starts = _Starts([task.units[0] for task in tasks], [task.engine.value for task in tasks], count)
    for task in tasks:
        for lo in {task.units[0], max(0, task.units[0] - 3), min(count - 1, task.units[0] + 70)}:
            assert starts.after(task.engine, lo) == _walked(tasks, task.engine, lo), (task, lo)
    # every task's own window at once, as the search reads it
    assert starts.after_each().tolist() == [_walked(tasks, task.engine, task.units[0]) for task in tasks]


@pytest.mark.parametrize("name", ["gptj_block_qdq", "llama_prefill_decode", "googlenet", "lm"])
def test_window_bits_agree_with_the_walk(name, tmp_path):
    loaded = load_model(bundled_or_lm(tmp_path, name))
    analysis = Analysis.of(loaded.model, typed=loaded.inferred.graph)
    tasks = [task for task in analysis.tasks if task.fusable]
    assert len({task.engine for task in tasks}) > 1
    _check(tasks, len(analysis.units))


def test_window_bits_across_chunk_borders():
    """Starts on both sides of every 64-bit chunk border, three engines, one lone engine."""
    from hexfuse.graph_passes.analysis.tasks import Task

    engines = [Engine.MATRIX, Engine.VECTOR, Engine.DMA]
    firsts = [0, 1, 62, 63, 64, 65, 127, 128, 129, 190, 191, 192, 250]
    tasks = [Task(i, engines[(i * 7) % 3], (first,)) for i, first in enumerate(firsts)]
    _check(tasks, 260)
    _check(tasks[:1], 260)  # no other engine at all: every window empty


def test_intersect_agrees_with_isin():
    rng = np.random.default_rng(7)
    for size in (0, 1, 5, 200):
        for _ in range(50):
            left, right = rng.integers(0, 3 * size + 1, size), rng.integers(0, 3 * size + 1, rng.integers(0, size + 1))
            assert _intersect(left, right) is bool(np.isin(left, right).any())

"""Whole-model time (graph_passes/cost/model_time.py): HMX row padding and its pairing with shared task costs."""

from __future__ import annotations

from hexfuse.graph_passes.cost.cli import scorer_for
from hexfuse.graph_passes.cost.model_time import model_time, row_padding_ns
from tests.cost.specs import fused, matmul_task, vector_task


def _padding(rows: int) -> tuple[float, float]:
    scorer = scorer_for("sm8550", 0.1, as_designed=True)
    op = fused(matmul_task(f"m{rows}", rows, 64, 64))
    cost = scorer.task_costs(op)[1]
    return row_padding_ns(op, cost, scorer.target.hmx_tile), cost[0].ops[0].main_ns


def test_rows_below_a_tile_pay_for_the_whole_tile():
    full, main = _padding(32)
    assert full == 0.0 and main > 0
    half, main16 = _padding(16)
    assert abs(half - main16) < 1e-9  # 16 of 32 rows: as much again
    quarter, main8 = _padding(8)
    assert abs(quarter - 3 * main8) < 1e-9


def test_structurally_equal_tasks_are_padded_by_their_own_shapes():
    """The scorer shares one TaskCost between equal tasks (naming the first one's nodes): padding must
    still find this op's matrix nodes."""
    scorer = scorer_for("sm8550", 0.1, as_designed=True)
    first = fused(matmul_task("a", 16, 64, 64), vector_task("v", (16, 64)))
    second = fused(matmul_task("b", 16, 64, 64), vector_task("w", (16, 64)))
    costs = [scorer.task_costs(op)[1] for op in (first, second)]
    assert costs[1][0].ops[0].node == "a_mm"  # shared by structure
    pads = [row_padding_ns(op, c, scorer.target.hmx_tile) for op, c in zip((first, second), costs)]
    assert pads[0] > 0 and pads[0] == pads[1]


def test_model_time_adds_unfused_tasks_groups_and_padding():
    scorer = scorer_for("sm8550", 0.1, as_designed=True)
    single = fused(matmul_task("s", 16, 64, 64))
    group = fused(matmul_task("g", 16, 64, 64), vector_task("gv", (16, 64)))
    verdict = scorer.score(group)
    alone = model_time([], [single], scorer)
    both = model_time([(group, verdict)], [single], scorer)
    assert alone.dispatches == 1 and both.dispatches == 2
    assert both.fused_ns == verdict.details["t4_fused_concurrent"]
    assert both.padding_ns == 2 * alone.padding_ns > 0
    assert both.total_ns == both.unfused_ns + both.fused_ns + both.padding_ns

"""Simulator and scorer behaviour on hand-built groups: physical bounds, balance, bandwidth, VTCM."""

from __future__ import annotations

import itertools

import pytest

from hexfuse.graph_passes.cost import CostScorer, load_target
from hexfuse.graph_passes.cost.simulate import Stage, TaskPlan, simulate
from tests.cost.specs import dma_task, estimated, fused, matmul_task, vector_task

V73 = estimated("sm8550")  # the pairs below are sized for its HMX : HVX : DMA ratios


def _busiest_engine_ns(scorer: CostScorer, op) -> float:
    """Lower bound of any schedule: HMX work, DDR/DMA work, HVX work spread over every context, and a
    task op's HVX work on the one HVX thread it runs on (op_hvx_contexts)."""
    target = scorer.target
    _, costs = scorer.task_costs(op)
    rate = min(target.dma_bytes_per_ns, target.ddr_bytes_per_ns)
    hmx = sum(c.main_ns for c in costs if c.main_lane == "hmx")
    dma = sum((c.ddr_in + c.ddr_out) / rate + (c.main_ns if c.main_lane == "dma" else 0) for c in costs)
    work = [c.hvx_side_ns + (c.main_ns if c.main_lane == "hvx" else 0) for c in costs]
    task_op = max(w / target.op_hvx_contexts for c, w in zip(costs, work) if c.engine != "matrix")
    return max(hmx, dma, sum(work) / target.hvx_contexts, task_op)


GROUPS = [
    (matmul_task("m", m, k, n, dtype), vector_task("v", shape, op))
    for (m, k, n), shape, op, dtype in itertools.product(
        [(64, 256, 256), (512, 512, 512), (128, 4096, 4096)], [(256, 256), (1024, 1024), (2048, 1024)],
        ["Relu", "Softmax"], ["uint8", "float32"])
] + [
    (matmul_task("m", 256, 1024, 1024), vector_task("v", (512, 512), "Tanh"), dma_task("d", (64, 64, 64))),
    (matmul_task("m", 64, 64, 64, static_weight=False), dma_task("d", (1024, 1024))),
]


@pytest.mark.parametrize("target_name", ["sm8550", "sm8750", "x-elite"])
def test_physical_bounds(target_name):
    scorer = CostScorer(load_target(target_name), 0.0, as_designed=True)
    for parts in GROUPS:
        op = fused(*parts)
        base = scorer.predict(op)
        overhead = base.fused_overhead_ns  # the expanded ops' dispatches and HVX launches
        lower = overhead + _busiest_engine_ns(scorer, op)
        micro_ops = sum(stage.ns * plan.sim_tiles for plan in base.choice.plans for stage in plan.stages)
        assert base.t4_fused_concurrent >= lower * (1 - 1e-9), (parts[0][0].id, base)
        assert base.t4_fused_concurrent <= overhead + micro_ops * (1 + 1e-9)
        # the matrix task keeps its QNN ops, every other task becomes one task op: never more ops
        assert base.ops_fused <= base.ops_serial and base.launches_fused <= base.launches_serial
        # entry merging = the per-op constants saved + what running the tasks as the fused op changes
        assert base.t1_serial - base.t3_fused_serial == pytest.approx(
            base.constants_ns + sum(base.alone_ns) - base.serial.makespan)
        assert base.t2_best_existing <= base.t1_serial
        assert base.entry_merge_gain + base.overlap_gain == pytest.approx(1 - base.t4_fused_concurrent / base.t1_serial)


def test_list_scheduler_respects_lanes_and_order():
    plan = TaskPlan("a", 1, 1e6, 3, 2, (Stage("dma_in", "dma", 10.0), Stage("compute", "hmx", 20.0)), 3)
    other = TaskPlan("b", 1, 1e6, 2, 2, (Stage("compute", "hmx", 5.0),), 2)
    schedule = simulate([plan, other])
    by_lane: dict[str, list] = {}
    for slot in schedule.slots:
        by_lane.setdefault(slot.lane, []).append(slot)
    for slots in by_lane.values():  # a lane runs one micro-op at a time
        slots.sort(key=lambda s: s.start)
        assert all(a.end <= b.start + 1e-9 for a, b in itertools.pairwise(slots))
    a_slots = {(s.tile, s.kind): s for s in schedule.slots if s.task_id == "a"}
    for tile in range(3):  # compute of a tile never starts before its data arrived
        assert a_slots[(tile, "compute")].start >= a_slots[(tile, "dma_in")].end
    assert schedule.busy["hmx"] == pytest.approx(3 * 20 + 2 * 5)
    assert schedule.makespan == pytest.approx(3 * 20 + 2 * 5)  # b fills HMX while a's first tile arrives


def _speedup(scorer: CostScorer, op) -> float:
    base = scorer.predict(op)
    return base.t3_fused_serial / base.t4_fused_concurrent


def test_balanced_pair_overlaps_nearly_2x():
    sizes = [(256, 256), (512, 512), (768, 768), (1024, 512), (1024, 768), (1024, 1024)]
    scorer = CostScorer(V73, 0.1, as_designed=True)
    speedups = [_speedup(scorer, fused(matmul_task("m", 512, 512, 512), vector_task("v", s, "Softmax"))) for s in sizes]
    # the task op runs on its one HVX thread in t3 and t4 alike and the matrix task keeps the other
    # contexts for requant, so the best pair hides the shorter task whole: a ceiling of 2x, less the
    # expanded ops' dispatches and the pipeline fill/drain
    assert 1.55 <= max(speedups) < 2.0
    assert speedups.index(max(speedups)) == 1  # (512, 512): the vector task about as long as the matrix task
    # what-if: no per-op or per-tile overheads at all; only the fill/drain keeps it below 2x
    bare = CostScorer(V73.with_values(dispatch_ns=0.0, hvx_launch_ns=0.0, launch_ns=0.0), 0.1, as_designed=True)
    bare_best = _speedup(bare, fused(matmul_task("m", 512, 512, 512), vector_task("v", (512, 512), "Softmax")))
    assert max(speedups) < bare_best <= 2.0


def test_unbalanced_pair_gains_little_and_says_why():
    scorer = CostScorer(V73, 0.1, as_designed=True)
    op = fused(matmul_task("m", 512, 512, 512), vector_task("v", (64, 64)))
    verdict = scorer.score(op)
    assert not verdict.accepted
    assert verdict.reason.startswith("unbalanced: vector task is ")
    assert verdict.details["overlap_gain"] < 0.05
    balanced = scorer.score(fused(matmul_task("m", 512, 512, 512), vector_task("v", (512, 512), "Softmax")))
    assert balanced.accepted and balanced.details["overlap_gain"] > 0.3


def test_bandwidth_contention_lowers_the_gain():
    # both tasks stream from DDR (nothing stays resident); only the DDR share differs
    spilled = V73.with_values(resident_mb=0.001)
    op = fused(matmul_task("m", 512, 512, 1024), vector_task("v", (1024, 1024), "Softmax"))
    wide = CostScorer(spilled.with_values(ddr_gbps=1000.0, dma_gbps=1000.0), 0.0, as_designed=True).predict(op)
    narrow = CostScorer(spilled.with_values(ddr_gbps=20.0, dma_gbps=12.0), 0.0, as_designed=True).predict(op)
    assert wide.overlap_gain > 0.25
    assert narrow.overlap_gain < wide.overlap_gain - 0.2
    dma_busy = narrow.concurrent.busy["dma"]
    assert dma_busy / narrow.concurrent.makespan > 0.9  # the shared DDR lane is what limits the overlap


def test_ddr_bound_pair_is_rejected_with_reason():
    target = V73.with_values(resident_mb=0.001, ddr_gbps=20.0, dma_gbps=12.0)
    op = fused(matmul_task("m", 64, 4096, 4096), vector_task("v", (2048, 2048)))
    verdict = CostScorer(target, 0.1, as_designed=True).score(op)
    assert not verdict.accepted
    assert verdict.reason.startswith("DDR-bound: both tasks saturate bandwidth")


def test_vtcm_overflow_forces_tiling():
    op = fused(matmul_task("m", 512, 4096, 4096), vector_task("v", (2048, 1024), "Softmax"))
    base = CostScorer(V73, 0.0, as_designed=True).predict(op)
    plans = {p.task_id: p for p in base.choice.plans}
    _, costs = CostScorer(V73, 0.0, as_designed=True).task_costs(op)
    assert costs[0].vtcm_bytes > V73.vtcm_bytes  # 16 MB of weights alone
    assert plans["m"].tiles > 4
    assert sum(p.vtcm_bytes for p in base.choice.plans) <= V73.vtcm_bytes + 1
    for plan, cost in zip(base.choice.plans, costs):  # every tile (double-buffered) fits the task's share
        assert plan.buffers * cost.vtcm_bytes / plan.tiles <= plan.vtcm_bytes * (1 + 1e-9)


def test_vtcm_overflow_rejects_when_one_tile_cannot_fit():
    tiny = V73.with_values(vtcm_mb=0.25, resident_mb=0.1)
    op = fused(matmul_task("m", 512, 4096, 4096), vector_task("v", (1024, 1024), "Softmax"))
    verdict = CostScorer(tiny, 0.0, as_designed=True).score(op)
    assert not verdict.accepted
    assert verdict.reason.startswith("VTCM overflow: needs ")
    assert "> 0.25 MB and tiling does not fit" in verdict.reason

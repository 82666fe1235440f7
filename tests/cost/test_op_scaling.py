"""Issue 43: the replay's per-op constant scales with the op's work (a 10 ns slice is not charged what a vision
convolution is), no replay ends before its DDR bytes at the sustained bandwidth, and tools/bench/fit_replay.py's joint fit
recovers the constants a set of rows was made with (synthetic schedules: fast, and each assertion can fail)."""

from __future__ import annotations

import pytest

from hexfuse.graph_passes.cost.replay import ddr_floor_ns, graph_of, op_constant, op_costs, replay
from hexfuse.graph_passes.cost.target import load_target
from hexfuse.graph_passes.engines.qnn_schedule import QnnSchedule, ScheduledOp
from hexfuse.tools.bench import fit_replay


def op(lane, kernel, resource, after=(), macs=0, vtcm=0, ddr=0) -> ScheduledOp:
    return ScheduledOp(0, lane, kernel, resource, "", -1, -1, tuple(after), vtcm, ddr, macs, -1)


def tiny_ops(n: int, vtcm: int, ddr: int = 0) -> QnnSchedule:
    """One HMX op, then n HVX ops of ``vtcm`` bytes each on the HVX list (independent of each other)."""
    return QnnSchedule((op("main", "ConvLayer", "hmx", macs=10**6, ddr=ddr),
                        *[op("vec", "SlicePad", "hvx", after=(0,), vtcm=vtcm) for _ in range(n)]))


def test_flat_by_default_and_scaled_by_work_when_fitted():
    t = load_target("sm8750")
    flat = t.with_values(qnn_op_floor_fraction=1.0)
    assert op_constant(2200.0, 0.0, flat) == op_constant(2200.0, 1e6, flat) == 2200.0
    scaled = t.with_values(qnn_op_floor_fraction=0.1, qnn_op_half_ns=300.0)
    costs = [op_constant(2200.0, w, scaled) for w in (0.0, 10.0, 300.0, 3000.0, 1e6)]
    assert costs[0] == pytest.approx(220.0) and costs[2] == pytest.approx(220.0 + 0.5 * 1980.0)
    assert costs == sorted(costs) and costs[-1] == pytest.approx(2200.0, rel=1e-3)
    # thousands of tiny slices: the per-op constant no longer dominates
    schedule = tiny_ops(2000, 1536)
    before = replay(graph_of(schedule, op_costs(schedule, flat)), 4).latency_ns
    after = replay(graph_of(schedule, op_costs(schedule, scaled)), 4).latency_ns
    assert after < 0.2 * before


def test_no_replay_ends_before_its_ddr_bytes():
    t = load_target("sm8650").with_values(ddr_sustained_fraction=0.5)
    schedule = tiny_ops(4, 128, ddr=400_000_000)  # 400 MB through DDR, almost no work
    result = replay(graph_of(schedule, op_costs(schedule, t)), t.hvx_contexts)
    assert result.ddr_bound and result.latency_ns == pytest.approx(400e6 / (t.ddr_gbps * 0.5))
    assert result.latency_ns == pytest.approx(ddr_floor_ns(schedule, t)) and result.lists_ns < result.latency_ns
    faster = t.with_values(ddr_sustained_fraction=1.0)
    assert replay(graph_of(schedule, op_costs(schedule, faster)), 4).latency_ns == pytest.approx(result.latency_ns / 2)
    light = tiny_ops(4, 128, ddr=1000)
    assert not replay(graph_of(light, op_costs(light, t)), 4).ddr_bound


def test_joint_fit_recovers_the_constants_rows_were_made_with():
    truth = dict(qnn_op_floor_fraction=0.2, qnn_op_half_ns=300.0, qnn_hvx_rate_scale=2.0, ddr_sustained_fraction=0.5,
                 graph_execute_ns=50e3)
    schedules = {"many-tiny": tiny_ops(600, 1536), "few-large": tiny_ops(8, 4_000_000),
                 "ddr": tiny_ops(50, 1536, ddr=80_000_000), "mixed": tiny_ops(200, 200_000, ddr=20_000_000)}
    rows = []
    for target in ("sm8650", "sm8750"):
        t = load_target(target).with_values(**truth)
        for name, schedule in schedules.items():
            ms = (replay(graph_of(schedule, op_costs(schedule, t)), t.hvx_contexts).latency_ns + 50e3) / 1e6
            rows.append(fit_replay.JointRow("vision", name, name, target, ms, schedule))
    (f, h, k, a, ss), before, fitted, held = fit_replay.fit_joint(
        rows, grid_f=(1.0, 0.5, 0.2, 0.05), grid_h=(30.0, 300.0, 3000.0), grid_s=(0.3, 0.5, 0.8), grid_r=(1.0, 2.0),
        grid_e=(0.0, 50e3, 100e3), grid_a=(1.0, 0.5), caps={"sm8650": 100e3, "sm8750": 100e3})
    assert (f, h, k, ss) == (0.2, 300.0, 2.0, {"sm8650": (0.5, 50e3), "sm8750": (0.5, 50e3)})
    assert a == 1.0  # vision rows (float) say nothing of 16-bit activations: the first of the grid
    assert fitted == pytest.approx([r.published_ms for r in rows], rel=1e-6)
    assert any(abs(b / r.published_ms - 1) > 0.2 for b, r in zip(before, rows))  # the flat constant was off


def test_a_graph_execution_costs_at_most_half_the_fastest_published_inference():
    # sm8750's fastest published model through ONNX Runtime is googlenet w8a8 at 0.302 ms, through a QNN DLC
    # mobilenet_v2 w8a8 at 0.223 ms (tools/anchors/published.csv)
    assert fit_replay.execute_cap_ns("sm8750") == pytest.approx(0.302e6 / 2)
    assert fit_replay.execute_cap_ns("sm8750", "qnn_dlc") == pytest.approx(0.223e6 / 2)
    schedule = tiny_ops(8, 4_000_000)
    row = fit_replay.JointRow("vision", "m", "m", "sm8750", 1.0, schedule)
    t = load_target("sm8750")
    assert fit_replay.joint_predict(row, t.with_values(graph_execute_ns=80e3), 1e6) == pytest.approx(
        fit_replay.joint_predict(row, t.with_values(graph_execute_ns=1.0), 1e6) + 0.08, abs=1e-5)

"""The cost model of the HTP executor: expanded ops, task ops on one HVX thread, the part of a gain that
rests on dispatch_ns / hvx_launch_ns, the overlap rule, and what an engine map changes."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from hexfuse.graph_passes.cost import CostScorer, load_target
from hexfuse.graph_passes.cost.baselines import today_contexts
from hexfuse.graph_passes.engines.engine_map import EngineMap, Kernel, NodeEngines
from hexfuse.graph_passes.spec.model import NodeSpec, TaskSpec, TensorSpec
from tests.cost.specs import fused, matmul_task, vector_task

V75 = load_target("sm8650")


def chain_task(tid: str, shape: tuple[int, ...], ops: tuple[str, ...]):
    """A vector task of several elementwise nodes in a row (one QNN op each today, one task op fused)."""
    names = [f"{tid}_{i}" for i in range(len(ops) + 1)]
    nodes = tuple(NodeSpec(f"{tid}_{op.lower()}{i}", op, "", (names[i],), (names[i + 1],)) for i, op in enumerate(ops))
    tensors = [TensorSpec(n, "uint8", shape) for n in names]
    size = math.prod(shape)
    return TaskSpec(tid, "vector", nodes, (names[0],), (names[-1],), elements=size, bytes_moved=2 * size * len(ops)), tensors


def _map(**nodes: NodeEngines) -> EngineMap:
    return EngineMap("m.onnx", "0" * 64, "sm8650", dict(nodes))


def test_fused_op_keeps_the_matrix_ops_and_merges_a_vector_chain_into_one_task_op():
    op = fused(matmul_task("m", 256, 512, 512), chain_task("v", (256, 512), ("Relu", "Sigmoid", "Relu")))
    base = CostScorer(V75, 0.0, as_designed=True).predict(op)
    assert (base.ops_serial, base.ops_fused) == (4, 2)  # MatMul + 3 vector ops -> MatMul + 1 task op
    assert (base.launches_serial, base.launches_fused) == (3, 1)
    assert base.dispatch_saved_ns == V75.dispatch_ns * 2 and base.launch_saved_ns == V75.hvx_launch_ns * 2
    assert base.fused_overhead_ns == V75.dispatch_ns * 2 + V75.hvx_launch_ns * 1
    plans = {p.task_id: p for p in base.choice.plans}
    assert plans["v"].hvx_contexts == V75.op_hvx_contexts == 1  # the task op runs on its own HVX thread
    assert plans["m"].hvx_contexts == V75.hvx_contexts - 1  # QNN's ops get the rest for their requant


def test_the_estimated_part_of_a_gain_is_exactly_what_the_constants_add():
    """t2 - t4 is linear in dispatch_ns and hvx_launch_ns: pricing them at 0 removes exactly constants_ns."""
    op = fused(matmul_task("m", 256, 512, 512), chain_task("v", (256, 512), ("Relu", "Sigmoid", "Relu")))
    base = CostScorer(V75, 0.0, as_designed=True).predict(op)
    bare = CostScorer(V75.with_values(dispatch_ns=0.0, hvx_launch_ns=0.0), 0.0, as_designed=True).predict(op)
    assert base.constants_ns > 0
    assert base.saved_ns - bare.saved_ns == pytest.approx(base.constants_ns, rel=1e-9)
    assert base.t3_fused_serial - base.t4_fused_concurrent == pytest.approx(
        bare.t3_fused_serial - bare.t4_fused_concurrent, rel=1e-9)  # the overlap owes them nothing
    verdict = CostScorer(V75, 0.0, as_designed=True).score(op)
    assert verdict.details["saved_by_dispatch_ns"] + verdict.details["saved_by_hvx_launch_ns"] == pytest.approx(
        base.constants_ns, abs=0.2)


def test_groups_without_overlap_are_fused_only_when_asked():
    """The vector work costs next to nothing, so all the predicted gain is entry merging."""
    cheap = V75.with_values(hvx_bytes_per_cycle=1e9, launch_ns=1e-6)
    op = fused(matmul_task("m", 256, 512, 512), chain_task("v", (64, 64), ("Relu", "Sigmoid", "Relu", "Relu")))
    verdict = CostScorer(cheap, 0.05, as_designed=True).score(op)
    assert not verdict.accepted and verdict.reason.startswith("merge only: ")
    assert "entry merging alone would save" in verdict.reason and "--allow-merge-only" in verdict.reason
    allowed = CostScorer(cheap, 0.05, allow_merge_only=True, as_designed=True).score(op)
    assert allowed.accepted and allowed.details["entry_merge_gain"] > 0.05 > allowed.details["overlap_gain"]


def test_map_prices_a_node_qnn_folds_at_nothing_today_but_not_in_the_fused_op():
    op = fused(matmul_task("m", 256, 512, 512), vector_task("v", (512, 512), "Relu"))
    folded = _map(v_relu=NodeEngines("none", "none", (), "", "conv0"))
    costs = CostScorer(V75, 0.0, engines=folded, as_designed=True).task_costs(op)[1]
    vector = costs[1]
    assert vector.original.ops == () and vector.ops  # QNN runs it inside conv0's kernels; the task op must run it
    verdict = CostScorer(V75, 0.0, engines=folded, as_designed=True).score(op)
    plain = CostScorer(V75, 0.0, as_designed=True).score(op)
    assert verdict.details["t1_serial"] < plain.details["t1_serial"] and verdict.gain < plain.gain


def test_map_moves_a_matrix_op_to_hvx_and_the_pair_onto_one_engine():
    op = fused(matmul_task("m", 256, 512, 512, dtype="float32"), vector_task("v", (512, 512), "Relu", "float32"))
    on_hvx = _map(m_mm=NodeEngines("matrix", "hvx", (Kernel("MatMul_bias", "hvx", "matrix"),)))
    costs = CostScorer(V75, 0.0, engines=on_hvx, as_designed=True).task_costs(op)[1]
    assert costs[0].main_lane == "hvx" and costs[0].slices == 1
    assert today_contexts(costs[0], V75) == 1  # QNN ran it as one HVX op
    on_hmx = CostScorer(V75, 0.0, as_designed=True).task_costs(op)[1][0]
    assert on_hmx.main_lane == "hmx" and on_hmx.main_ns < costs[0].main_ns
    verdict = CostScorer(V75, 0.3, engines=on_hvx, as_designed=True).score(op)
    assert not verdict.accepted


def test_map_side_work_only_where_qnn_runs_helpers():
    op = fused(matmul_task("m", 256, 512, 512), vector_task("v", (512, 512)))
    plain = CostScorer(V75, 0.0, as_designed=True).task_costs(op)[1][0]
    assert plain.requant_ns > 0  # the estimate: an HVX requant pass after HMX
    bare = _map(m_mm=NodeEngines("matrix", "hmx", (Kernel("ConvLayer_s1.opt", "hmx", "matrix"),
                                                   Kernel("ConvLayer.opt.weights_to_vtcm", "dma", "move"))))
    assert CostScorer(V75, 0.0, engines=bare, as_designed=True).task_costs(op)[1][0].hvx_side_ns == 0  # QNN runs none
    helped = _map(m_mm=NodeEngines("matrix", "hmx", (Kernel("ConvLayer_s1.opt", "hmx", "matrix"),
                                                     Kernel("ForceFormat_Flat", "hvx", "move"))))
    assert CostScorer(V75, 0.0, engines=helped, as_designed=True).task_costs(op)[1][0].requant_ns == pytest.approx(plain.requant_ns)


def test_vector_work_qnn_slices_uses_more_contexts_today():
    op = fused(matmul_task("m", 256, 512, 512), vector_task("v", (1024, 1024), "Softmax"))
    sliced = _map(v_softmax=NodeEngines("vector", "hvx", (Kernel("Softmax_Crouton", "hvx", "compute", 3),)))
    cost = CostScorer(V75, 0.0, engines=sliced, as_designed=True).task_costs(op)[1][1]
    assert cost.original.slices == 3 and today_contexts(cost, V75) == 3  # QNN cut it into three HVX ops
    assert cost.slices == 0  # as a task op it runs on one HVX thread
    assert today_contexts(replace(cost, today=None), V75) == V75.op_hvx_contexts  # unmeasured: one HVX op


def test_vtcm_reuse_orders_a_task_op_whose_tensors_crowd_out_the_matrix_tiles():
    op = fused(matmul_task("m", 512, 1024, 1024), vector_task("v", (1024, 1024), "Softmax"))
    roomy = CostScorer(V75, 0.0, as_designed=True).predict(op)
    assert not roomy.vtcm_ordered and roomy.t4_fused_concurrent < roomy.t3_fused_serial
    tight = V75.with_values(vtcm_mb=2.5, resident_mb=2.0)  # the Softmax's 2 MB stay resident: no room beside
    crowded = CostScorer(tight, 0.0, as_designed=True).predict(op)
    assert crowded.vtcm_ordered and crowded.t4_fused_concurrent == crowded.t3_fused_serial
    verdict = CostScorer(tight, 0.0, as_designed=True).score(op)
    assert not verdict.accepted and "VTCM-ordered: " in verdict.reason  # the reason names the VTCM ordering

"""Executor behaviour seen through the trace: lanes, the barrier switch, scratch released per task."""

from __future__ import annotations


from pathlib import Path

import numpy as np
import pytest

from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, NodeSpec, TaskSpec, TensorSpec
from hexfuse.op_package.build import build_host
from hexfuse.op_package.host import HostPackage
from hexfuse.op_package.render import render_package
from hexfuse.op_package.writer import write_tree
from tests.op_package._harness import LIGHT


def _multi_node_op(case):
    """A fused op whose tasks hold intermediates (scratch), e.g. inception_v2's BN->Mul->Add->Relu."""
    for op in case.spec.fused_ops:
        if sum(len(t.nodes) for t in op.tasks) >= 4:
            return op
    pytest.skip("no fused op with intermediates")


@pytest.fixture(scope="module")
def v2(case_for):
    return case_for(LIGHT / "light_inception_v2.onnx")


def test_serial_mode_runs_one_global_order(v2) -> None:
    op = _multi_node_op(v2)
    _, trace = v2.package.run(op.op_type, [v2.values[t.name] for t in op.inputs], serial=True)
    ops = trace.micro_ops()
    for before, after in zip(ops, ops[1:]):  # events are in plan order
        assert after.start_ns >= before.end_ns


def test_concurrent_mode_uses_one_lane_per_resource(v2) -> None:
    op = _multi_node_op(v2)
    _, trace = v2.package.run(op.op_type, [v2.values[t.name] for t in op.inputs], serial=False)
    lanes = {e.resource: {x.lane for x in trace.micro_ops() if x.resource == e.resource} for e in trace.micro_ops()}
    assert set(lanes) == {t.engine for t in op.tasks}
    assert all(len(v) == 1 for v in lanes.values())  # default quota: one worker per resource


def test_scratch_is_released_when_its_task_ends(v2) -> None:
    op = _multi_node_op(v2)
    _, trace = v2.package.run(op.op_type, [v2.values[t.name] for t in op.inputs], serial=False)
    for held in (e for e in trace.events if e.kind == "scratch"):
        last = max(e.end_ns for e in trace.micro_ops() if e.task == held.task)
        assert last <= held.end_ns
        assert held.end_ns - last < 5_000_000  # freed right after the task's last micro-op


def _two_scratch_tasks_spec() -> FusionSpec:
    t = lambda n, shape: TensorSpec(n, "float32", shape)  # noqa: E731
    mm = TaskSpec("t0", "matrix", (NodeSpec("mm", "MatMul", "", ("a", "w"), ("m",)),
                                   NodeSpec("r", "Relu", "", ("m",), ("y",))), ("a", "w"), ("y",))
    vec = TaskSpec("t1", "vector", (NodeSpec("s", "Sigmoid", "", ("x",), ("h",)),
                                    NodeSpec("n", "Neg", "", ("h",), ("z",))), ("x",), ("z",))
    tensors = (t("a", (64, 64)), t("w", (64, 64)), t("x", (64, 64)), t("m", (64, 64)), t("y", (64, 64)),
               t("h", (64, 64)), t("z", (64, 64)))
    op = FusedOp("HexFuse_0_budget", "hexfuse/HexFuse_0_budget", tensors[:3], (tensors[4], tensors[6]),
                 (mm, vec), tensors)
    return FusionSpec("budget.onnx", "0" * 64, "sm8550", (op,))


def test_scratch_budget_admits_tasks_in_turn_with_same_results(tmp_path: Path) -> None:
    spec = _two_scratch_tasks_spec()
    package = HostPackage(build_host(write_tree(render_package(spec), tmp_path / "pkg")), spec)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(3)]
    free, trace_free = package.run("HexFuse_0_budget", inputs)
    package.configure(scratch_budget=1)  # smaller than either task's scratch: one task holds it at a time
    try:
        tight, trace = package.run("HexFuse_0_budget", inputs)
    finally:
        package.configure()
    held = sorted((e for e in trace.events if e.kind == "scratch"), key=lambda e: e.start_ns)
    assert len(held) == 2 and held[1].start_ns >= held[0].end_ns  # admitted when the first returned it
    both = sorted((e for e in trace_free.events if e.kind == "scratch"), key=lambda e: e.start_ns)
    assert both[1].start_ns < both[0].end_ns  # without a budget both tasks hold scratch at once
    for x, y in zip(free, tight):
        assert np.array_equal(x, y)
    np.testing.assert_allclose(free[1], -1 / (1 + np.exp(-inputs[2])), rtol=1e-6)

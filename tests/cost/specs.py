"""Build FusedOp/TaskSpec objects directly (no ONNX) for cost-model tests."""

from __future__ import annotations

import math

from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec, TaskSpec, TensorSpec


def _t(name: str, shape: tuple[int, ...], dtype: str = "uint8", static: bool = False) -> TensorSpec:
    return TensorSpec(name, dtype, tuple(shape), static)


def matmul_task(tid: str, m: int, k: int, n: int, dtype: str = "uint8", static_weight: bool = True):
    """A matrix task: [m, k] x [k, n]; returns (TaskSpec, tensors)."""
    a, w, y = f"{tid}_a", f"{tid}_w", f"{tid}_y"
    node = NodeSpec(f"{tid}_mm", "MatMul", "", (a, w), (y,))
    tensors = [_t(a, (m, k), dtype), _t(w, (k, n), dtype, static_weight), _t(y, (m, n), dtype)]
    item = 1 if dtype == "uint8" else 2
    task = TaskSpec(tid, "matrix", (node,), (a, w), (y,), macs=m * k * n, bytes_moved=(m * k + k * n + m * n) * item)
    return task, tensors


def vector_task(tid: str, shape: tuple[int, ...], op: str = "Relu", dtype: str = "uint8"):
    x, y = f"{tid}_x", f"{tid}_y"
    node = NodeSpec(f"{tid}_{op.lower()}", op, "", (x,), (y,))
    size = math.prod(shape)
    tensors = [_t(x, shape, dtype), _t(y, shape, dtype)]
    return TaskSpec(tid, "vector", (node,), (x,), (y,), elements=size, bytes_moved=2 * size), tensors


def dma_task(tid: str, shape: tuple[int, ...], dtype: str = "uint8"):
    x, y = f"{tid}_x", f"{tid}_y"
    node = NodeSpec(f"{tid}_transpose", "Transpose", "", (x,), (y,), {"perm": tuple(reversed(range(len(shape))))})
    tensors = [_t(x, shape, dtype), _t(y, tuple(reversed(shape)), dtype)]
    return TaskSpec(tid, "dma", (node,), (x,), (y,), bytes_moved=2 * math.prod(shape)), tensors


def fused(*parts) -> FusedOp:
    tasks = tuple(task for task, _ in parts)
    tensors = tuple(t for _, ts in parts for t in ts)
    inputs = tuple(t for t in tensors if any(t.name in task.inputs for task in tasks))
    outputs = tuple(t for t in tensors if any(t.name in task.outputs for task in tasks))
    return FusedOp("HexFuse_test", "hexfuse/test", inputs, outputs, tasks, tensors)


# The bundled targets' figures before they were fitted to published phone latencies (docs/anchors.md).
# Scenarios that test the simulator or calibration mechanics are sized for these ratios of HMX, HVX and
# DMA speed and for these overheads, so they pin them instead of following every refit.
_ESTIMATED_RATES = {"sm8550": (8192, 4096, 35.2), "sm8650": (16384, 8192, 35.2), "sm8750": (22528, 11264, 38.4)}


def estimated(name: str):
    from hexfuse.graph_passes.cost import load_target

    int8, fp16, dma = _ESTIMATED_RATES[name]
    return load_target(name).with_values(hmx_int8_macs_per_cycle=int8, hmx_fp16_macs_per_cycle=fp16, dma_gbps=dma,
                                         ddr_npu_fraction=0.6, resident_mb=1.0, dispatch_ns=1500.0,
                                         hvx_launch_ns=300.0, factors={})

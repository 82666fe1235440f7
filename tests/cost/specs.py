"""Build FusedOp/TaskSpec objects directly (no ONNX) for cost-model tests."""

from __future__ import annotations

import math

from hexfuse.graph_passes.spec import FusedOp, NodeSpec, TaskSpec, TensorSpec


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

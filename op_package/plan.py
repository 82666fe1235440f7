"""Lower one fused op of the spec into an executor plan: buffers, tasks, tiles, micro-ops, edges.

    FusedOp ──► buffers  [inputs | outputs | task intermediates (scratch, offset per task)]
            ──► tasks    (one lane each: matrix / vector / dma)
            ──► nodes    (kernel + params, via lower/ rules)
            ──► micro-ops: node k of a task cut into tiles; every tile of a consumer waits on every
                tile of its in-task producers. Plan order = task, node, tile (the serial-mode order).

Pure and deterministic: the same FusedOp gives the same plan.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp, TensorSpec
from hexfuse.op_package.lower import RULES, Kernel, NodeContext
from hexfuse.op_package.lower.context import ELEMENT_SIZE
from hexfuse.op_package.lower.qdq_fusion import fuse_qdq_units

RESOURCES = {"matrix": "kMatrix", "vector": "kVector", "dma": "kDma"}
TILE_COST = 1 << 18  # work per micro-op: enough to amortise a lane hand-off (~µs) on the host
MAX_TILES = 8
SCRATCH_ALIGN = 64


@dataclass(frozen=True)
class NodePlan:
    index: int
    task: int
    name: str
    op_type: str
    kernel: Kernel
    tiles: tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class MicroOpPlan:
    node: int
    task: int
    tile: int
    begin: int
    end: int
    resource: str
    num_deps: int
    succ_begin: int
    succ_count: int
    is_sink: bool


@dataclass(frozen=True)
class TaskPlan:
    id: str
    engine: str
    scratch_bytes: int
    first_op: int
    num_ops: int


@dataclass(frozen=True)
class OpPlan:
    op_type: str
    symbol: str  # C identifier
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    num_buffers: int
    nodes: tuple[NodePlan, ...]
    micro_ops: tuple[MicroOpPlan, ...]
    succ: tuple[int, ...]
    tasks: tuple[TaskPlan, ...]
    scratch: tuple[tuple[int, int, int], ...]  # (buffer, task, offset)


def c_symbol(op_type: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", op_type):
        raise HexfuseError(f"fused op type {op_type!r} is not a valid C identifier")
    return op_type


def tensor_bytes(tensor: TensorSpec, where: str) -> int:
    if tensor.dtype not in ELEMENT_SIZE:
        raise HexfuseError(f"{where}: tensor {tensor.name!r} has unsupported dtype {tensor.dtype}")
    if any((not isinstance(d, int)) or d <= 0 for d in tensor.shape):
        raise HexfuseError(f"{where}: tensor {tensor.name!r} has a dynamic or empty shape {tensor.shape}")
    return math.prod(tensor.shape) * ELEMENT_SIZE[tensor.dtype]


def split_tiles(units: int, unit_cost: float, max_tiles: int) -> tuple[tuple[int, int], ...]:
    count = max(1, min(units, max_tiles, MAX_TILES, math.ceil(units * unit_cost / TILE_COST)))
    bounds = [units * i // count for i in range(count + 1)]
    return tuple((bounds[i], bounds[i + 1]) for i in range(count))


def plan_fused_op(op: FusedOp, wire_ports: bool = False) -> OpPlan:
    """``wire_ports``: the plan reads and writes wire-encoded ports as their codes (lower/qdq_ports.py),
    for callers that always run it on wire tensors (the HTP task ops); the host ABI keeps float ports."""
    op = fuse_qdq_units(op, wire_ports)  # DQ -> op -> Q units become quantized kernels (lower/qdq_fusion.py)
    tensors = {t.name: t for t in op.tensors}
    for t in (*op.inputs, *op.outputs):
        tensors.setdefault(t.name, t)
    buffers: dict[str, int] = {}
    for t in (*op.inputs, *op.outputs):
        if t.name in buffers:
            raise HexfuseError(f"fused op {op.op_type}: tensor {t.name!r} appears twice among inputs/outputs")
        tensor_bytes(t, f"fused op {op.op_type}")
        buffers[t.name] = len(buffers)
    nodes: list[NodePlan] = []
    tasks: list[TaskPlan] = []
    scratch: list[tuple[int, int, int]] = []
    micro: list[dict] = []
    edges: list[list[int]] = []
    node_ops: dict[int, list[int]] = {}  # node index -> its micro-op ids
    for task_index, task in enumerate(op.tasks):
        if task.engine not in RESOURCES:
            raise HexfuseError(f"fused op {op.op_type}: task {task.id} has unknown engine {task.engine!r}")
        offset, producer = 0, {}
        for node in task.nodes:  # scratch for intermediates, in node order
            where = f"node {node.name!r} ({node.op_type})"
            for name in node.outputs:
                if name and name not in buffers:
                    if name not in tensors:
                        raise HexfuseError(f"{where}: output {name!r} is not described in the spec")
                    buffers[name] = len(buffers)
                    scratch.append((buffers[name], task_index, offset))
                    offset += -(-tensor_bytes(tensors[name], where) // SCRATCH_ALIGN) * SCRATCH_ALIGN
        first_op = len(micro)
        for node in task.nodes:
            where = f"node {node.name!r} ({node.op_type})"
            if node.domain not in ("", "ai.onnx"):
                raise HexfuseError(f"{where}: domain {node.domain!r} is not supported")
            rule = RULES.get(node.op_type)
            if rule is None:
                raise HexfuseError(f"{where}: op {node.op_type} is not supported by the hexfuse op package")
            for name in (*node.inputs, *node.outputs):
                if name:
                    if name not in buffers:
                        raise HexfuseError(f"{where}: input {name!r} is neither a fused-op input nor produced earlier in its task")
                    tensor_bytes(tensors[name], where)
            kern = rule(NodeContext(node, tensors, buffers))
            tiles = split_tiles(kern.units, kern.unit_cost, kern.max_tiles)
            plan = NodePlan(len(nodes), task_index, node.name, node.op_type, kern, tiles)
            preds = sorted({producer[n] for n in node.inputs if n in producer})
            ids = []
            for t, (b, e) in enumerate(tiles):
                ids.append(len(micro))
                micro.append({"node": plan.index, "task": task_index, "tile": t, "begin": b, "end": e,
                              "resource": RESOURCES[task.engine], "num_deps": 0})
                edges.append([])
            for p in preds:
                for src in node_ops[p]:
                    for dst in ids:
                        edges[src].append(dst)
                        micro[dst]["num_deps"] += 1
            node_ops[plan.index] = ids
            for name in node.outputs:
                if name:
                    producer[name] = plan.index
            nodes.append(plan)
        tasks.append(TaskPlan(task.id, RESOURCES[task.engine], offset, first_op, len(micro) - first_op))
    succ: list[int] = []
    rows = []
    for i, m in enumerate(micro):
        rows.append(MicroOpPlan(m["node"], m["task"], m["tile"], m["begin"], m["end"], m["resource"], m["num_deps"],
                                len(succ), len(edges[i]), not edges[i]))
        succ.extend(edges[i])
    return OpPlan(op.op_type, c_symbol(op.op_type), op.inputs, op.outputs, len(buffers), tuple(nodes),
                  tuple(rows), tuple(succ), tuple(tasks), tuple(scratch))

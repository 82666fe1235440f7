"""Baseline 1 on the executor's own kernels: every node of a fused group as its own custom-op entry.

On the CPU EP baselines 3 and 4 run hexfuse's portable host kernels and baseline 1 runs ONNX Runtime's,
so 1 -> 3 mixes kernel speed with the entry merge. Splitting each fused node back into one custom op
per original node (same kernels, same executor, one entry each) measures the entry merge like for like:

    HexFuse_7(a, W, b) -> (m, s)            HexFuse_7_n0(a, W) -> m      one ORT node, one executor run
      = { MatMul(a, W) -> m ;       ==>     HexFuse_7_n1(b) -> t          each
          Softmax(b) -> t ;                 HexFuse_7_n2(t) -> s
          Relu(t) -> s }

Tensor names are the fused node's actual ones (formal names of the spec are mapped by position) and
intermediates get the fused node's name as prefix, so a spec whose op types are shared by several
fused nodes splits correctly too.
"""
from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import onnx

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec, NodeSpec, TaskSpec

from .models import FUSED_DOMAIN


def _node_op(op: FusedOp, task: TaskSpec, node: NodeSpec, number: int) -> FusedOp:
    inputs = tuple(dict.fromkeys(n for n in node.inputs if n))
    outputs = tuple(n for n in node.outputs if n)
    one = TaskSpec(f"{task.id}_n{number}", task.engine, (node,), inputs, outputs)
    return FusedOp(f"{op.op_type}_n{number}", f"{op.node_name}/n{number}", tuple(op.tensor(n) for n in inputs),
                   tuple(op.tensor(n) for n in outputs), (one,),
                   tuple(op.tensor(n) for n in dict.fromkeys(inputs + outputs)), rule="per-node baseline")


def split_op(op: FusedOp) -> list[FusedOp]:
    nodes = [(task, node) for task in op.tasks for node in task.nodes]
    return [_node_op(op, task, node, k) for k, (task, node) in enumerate(nodes)]


def split_spec(spec: FusionSpec) -> FusionSpec:
    return FusionSpec(spec.model, spec.source_sha256, spec.target,
                      tuple(part for op in spec.fused_ops for part in split_op(op)))


def write_split_model(fused_path: str, spec: FusionSpec, out_path: Path) -> tuple[Path, dict[str, int]]:
    """The fused model with every fused node replaced by one custom-op node per original node (functions
    dropped, so nothing can be inlined); returns the path and how many nodes of each op type it holds."""
    model = onnx.load(fused_path)
    by_type = {op.op_type: op for op in spec.fused_ops}
    replaced: dict[int, list[onnx.NodeProto]] = {}
    local = {(f.domain, f.name) for f in model.functions}
    count: Counter[str] = Counter()
    for index, node in enumerate(model.graph.node):
        if node.domain != FUSED_DOMAIN or (node.domain, node.op_type) not in local:
            continue
        op = by_type.get(node.op_type)
        if op is None:
            raise HexfuseError(f"{fused_path}: fused node {node.name!r} ({node.op_type}) is not in the spec")
        rename = {t.name: actual for t, actual in zip(op.inputs, node.input)}
        rename.update({t.name: actual for t, actual in zip(op.outputs, node.output)})
        prefix = node.name or node.op_type

        def actual(name: str, rename=rename, prefix=prefix) -> str:
            return rename.get(name) or f"{prefix}/{name}"

        parts = []
        for part in split_op(op):
            parts.append(onnx.helper.make_node(part.op_type, [actual(t.name) for t in part.inputs],
                                               [actual(t.name) for t in part.outputs],
                                               name=f"{prefix}/{part.node_name.rsplit('/', 1)[-1]}",  # per fused node
                                               domain=FUSED_DOMAIN, serial=1))
        replaced[index] = parts
        count.update(part.op_type for part in parts)
    nodes = [p for i, n in enumerate(model.graph.node) for p in replaced.get(i, [n])]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    kept = [f for f in model.functions if f.domain != FUSED_DOMAIN]
    del model.functions[:]
    model.functions.extend(kept)
    tmp = out_path.with_suffix(".tmp.onnx")
    onnx.save(model, str(tmp))
    os.replace(tmp, out_path)
    return out_path, dict(count)

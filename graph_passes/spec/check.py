"""Does a fusion spec describe this fused model? Checked before a spec is used or carried forward.

Three checks, all cheap:
  hash   the spec's ``model_sha256`` (schema 4) must be the hash of the model file: a model and a
         spec of two different runs (an interrupted or killed write, a file copied over) never pair
  nodes  the model's fused nodes are exactly the spec's instances, each calling its op type (older
         specs carry no hash; and a hand-edited spec can claim any hash)
  bodies the hash covers the model, not the spec: every fused op's inputs, outputs and nodes must be
         its function's in the model, and each task must make the outputs it lists (a spec naming an
         output none of its nodes makes would give a package that never produces it)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.spec.model import FusedOp, FusionSpec

FUSE_AGAIN = "regenerate both with `hexfuse fuse`"


def check_spec_describes(model_path: Path, model_bytes: bytes, spec: FusionSpec, spec_path: Path) -> None:
    import onnx  # the node check parses the model; the op package generator itself never does

    if spec.model_sha256:
        actual = hashlib.sha256(model_bytes).hexdigest()
        if actual != spec.model_sha256:
            raise HexfuseError(f"{model_path} is not the model {spec_path} was written for (model sha256 "
                               f"{actual[:12]}…, the spec's {spec.model_sha256[:12]}…): {FUSE_AGAIN}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(model_bytes)
    except Exception:  # protobuf raises DecodeError and RuntimeWarning on garbage
        raise HexfuseError(f"cannot read fused model {model_path}: not an ONNX model") from None
    present = {n.name: n.op_type for n in proto.graph.node if n.domain == spec.domain}
    described = {name: op.op_type for op in spec.fused_ops for name in (op.instances or (op.node_name,))}
    missing = [name for name, op_type in described.items() if present.get(name) != op_type]
    if missing:
        raise HexfuseError(f"{model_path} has no fused node {missing[0]!r} of op type {described[missing[0]]} described "
                           f"by its spec ({len(missing)} missing): {FUSE_AGAIN}")
    unknown = sorted(set(present) - set(described))
    if unknown:
        raise HexfuseError(f"{model_path} has fused node {unknown[0]!r} that its spec does not describe "
                           f"({len(unknown)} such): {FUSE_AGAIN}")
    functions = {f.name: f for f in proto.functions if f.domain == spec.domain}
    for op in spec.fused_ops:
        problem = _op_problem(op, functions.get(op.op_type))
        if problem:
            raise HexfuseError(f"{spec_path} does not describe {model_path}: op type {op.op_type}: {problem}: {FUSE_AGAIN}")


def _op_problem(op: FusedOp, function) -> str | None:
    """Why the spec's op disagrees with its function in the model (or with itself), or None."""
    if function is None:
        return "the model has no function for it"
    if [t.name for t in op.inputs] != list(function.input):
        return f"inputs {[t.name for t in op.inputs]} are not the function's {list(function.input)}"
    if [t.name for t in op.outputs] != list(function.output):
        return f"outputs {[t.name for t in op.outputs]} are not the function's {list(function.output)}"
    spec_nodes = sorted((n.op_type, tuple(n.inputs), tuple(n.outputs)) for t in op.tasks for n in t.nodes)
    body = sorted((n.op_type, tuple(n.input), tuple(n.output)) for n in function.node)
    if spec_nodes != body:
        extra = sorted(set(spec_nodes) - set(body))
        return (f"its nodes are not the function's ({extra[0][0]} writing {list(extra[0][2])} is not in the model)"
                if extra else f"its nodes are not the function's ({len(body)} in the model, {len(spec_nodes)} in the spec)")
    made_by_task = {}
    for task in op.tasks:
        made = {name for n in task.nodes for name in n.outputs if name}
        for name in task.outputs:
            if name not in made:
                return f"task {task.id} lists output {name!r}, which none of its nodes makes"
        made_by_task.update(dict.fromkeys(task.outputs, task.id))
    for tensor in op.outputs:
        if tensor.name not in made_by_task:
            return f"output {tensor.name!r} is listed by no task"
    return None

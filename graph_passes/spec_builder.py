"""Build fusion-spec objects (graph_passes.spec) for tasks and groups of an analysed model."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper

from hexfuse.graph_passes.analysis import Analysis
from hexfuse.graph_passes.spec import FusedOp, NodeSpec, QuantSpec, TaskSpec, TensorSpec, structure_key
from hexfuse.graph_passes.tasks import Task


def _attribute_value(attribute: onnx.AttributeProto):
    value = helper.get_attribute_value(attribute)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if isinstance(value, onnx.TensorProto):
        array = onnx.numpy_helper.to_array(value)
        return tuple(array.reshape(-1).tolist()) if array.size != 1 else array.reshape(-1)[0].item()
    if isinstance(value, list):
        return tuple(v.decode("utf-8", errors="replace") if isinstance(v, bytes) else v for v in value)
    return value


def node_spec(node: onnx.NodeProto) -> NodeSpec:
    attributes = {a.name: _attribute_value(a) for a in sorted(node.attribute, key=lambda a: a.name)}
    return NodeSpec(node.name, node.op_type, node.domain, tuple(node.input), tuple(node.output), attributes)


def boundary(analysis: Analysis, node_indices: list[int]) -> tuple[list[str], list[str]]:
    """(inputs, outputs) of a set of nodes: tensors read from outside, tensors used outside."""
    flow = analysis.flow
    inside = set(node_indices)
    produced = {name for i in node_indices for name in flow.nodes[i].output if name}
    inputs: dict[str, None] = {}
    outputs: dict[str, None] = {}
    for index in node_indices:
        node = flow.nodes[index]
        for name in node.input:
            if name and name not in produced:
                inputs[name] = None
        for name in node.output:
            if not name:
                continue
            used_outside = any(user not in inside for user in flow.consumers.get(name, ()))
            if used_outside or name in flow.graph_outputs:
                outputs[name] = None
    return list(inputs), list(outputs)


def _quant_of(analysis: Analysis, node: onnx.NodeProto) -> QuantSpec | None:
    flow = analysis.flow
    scale = flow.constant_value(node.input[1])
    zero_name = node.input[2] if len(node.input) > 2 else ""
    zero = flow.constant_value(zero_name) if zero_name else None
    if scale is None or (zero_name and zero is None):
        return None
    quantized = node.input[0] if node.op_type == "DequantizeLinear" else node.output[0]
    dtype = flow.dtype(quantized)
    zero_points = tuple(int(v) for v in np.ravel(zero)) if zero is not None else (0,) * int(np.size(scale))
    axis = next((a.i for a in node.attribute if a.name == "axis"), 1) if np.size(scale) > 1 else None
    return QuantSpec(dtype, tuple(float(v) for v in np.ravel(scale)), zero_points, axis)


def _quant_params(analysis: Analysis) -> dict[str, QuantSpec]:
    """Quantization of every tensor that a Q produces or a DQ reads, model-wide."""
    result: dict[str, QuantSpec] = {}
    for node in analysis.flow.nodes:
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        quant = _quant_of(analysis, node)
        if quant is not None:
            result[node.input[0] if node.op_type == "DequantizeLinear" else node.output[0]] = quant
    return result


def tensor_spec(analysis: Analysis, name: str) -> TensorSpec:
    cache = analysis.tensor_specs
    if not cache:
        cache[""] = _quant_params(analysis)  # filled once; "" is never a tensor name
    spec = cache.get(name)
    if spec is None:
        flow = analysis.flow
        shape = flow.shape(name)
        quant = cache[""].get(name)
        spec = cache[name] = TensorSpec(name, flow.dtype(name), tuple(shape) if shape else (), flow.is_static(name), quant)
    return spec


def task_spec(analysis: Analysis, task: Task) -> TaskSpec:
    cached = analysis.task_specs.get(task.id)
    if cached is None:
        cached = analysis.task_specs[task.id] = _task_spec(analysis, task)
    return cached


def task_structure(analysis: Analysis, task: Task) -> tuple:
    """The task's structure key (graph_passes.spec.structure_key), cached per task."""
    cached = analysis.task_keys.get(task.id)
    if cached is None:
        cached = analysis.task_keys[task.id] = structure_key(task_spec(analysis, task), lambda n: tensor_spec(analysis, n))
    return cached


def _task_spec(analysis: Analysis, task: Task) -> TaskSpec:
    indices = list(analysis.task_body(task).body)
    inputs, outputs = boundary(analysis, indices)
    work = analysis.work(task)
    return TaskSpec(
        id=f"t{task.id}", engine=task.engine.value, nodes=tuple(node_spec(analysis.flow.nodes[i]) for i in indices),
        inputs=tuple(inputs), outputs=tuple(outputs), macs=work.macs, elements=work.elements,
        bytes_moved=work.bytes_moved,
    )


def group_nodes(analysis: Analysis, tasks: tuple[Task, ...]) -> list[int]:
    """The nodes that move into the fused node's function (boundary DQ/Q stay outside)."""
    return sorted(index for task in tasks for index in analysis.task_body(task).body)


def group_op_type(analysis: Analysis, tasks: tuple[Task, ...], number: int) -> str:
    """A C-identifier op type, unique per group and stable for the same model."""
    names = "\0".join(analysis.flow.nodes[i].name or str(i) for i in group_nodes(analysis, tasks))
    return f"HexFuse_{number}_{hashlib.sha1(names.encode()).hexdigest()[:6]}"


def _port(analysis: Analysis, tensor: TensorSpec, is_input: bool) -> TensorSpec:
    """A fused-op port with the encoding it has on the QNN EP: the DQ feeding it (an input) or the Q
    reading it (an output), both outside the fused node, fold into it (qdq_boundary.py)."""
    flow = analysis.flow
    if is_input:
        nodes = [flow.producer[tensor.name]] if tensor.name in flow.producer else []
    else:
        nodes = flow.consumers.get(tensor.name, [])
    wanted = "DequantizeLinear" if is_input else "QuantizeLinear"
    for index in nodes:
        node = flow.nodes[index]
        if node.op_type == wanted and node.domain in ("", "ai.onnx"):
            wire = _quant_of(analysis, node)
            if wire is None:
                return tensor
            # DQ(initializer): the QNN EP hands the port over as a STATIC quantized tensor (weights).
            static = is_input and flow.is_static(node.input[0])
            return replace(tensor, wire=wire, static=tensor.static or static)
    return tensor


def fused_op_spec(
    analysis: Analysis, tasks: tuple[Task, ...], op_type: str = "", node_name: str = "", predicted_gain: float = 0.0
) -> FusedOp:
    """The spec of independent tasks fused into one node.

    No task reads what another produces (candidates.py proved it), so the group's inputs and outputs
    are the union of its tasks' own: inputs in task order, shared ones once."""
    specs = tuple(task_spec(analysis, task) for task in tasks)
    inputs = list(dict.fromkeys(name for spec in specs for name in spec.inputs))
    outputs = [name for spec in specs for name in spec.outputs]
    produced = (name for spec in specs for node in spec.nodes for name in node.outputs if name)
    tensors = tuple(tensor_spec(analysis, name) for name in dict.fromkeys([*inputs, *produced]))
    by_name = {tensor.name: tensor for tensor in tensors}
    return FusedOp(
        op_type=op_type, node_name=node_name,
        inputs=tuple(_port(analysis, by_name[name], is_input=True) for name in inputs),
        outputs=tuple(_port(analysis, by_name[name], is_input=False) for name in outputs),
        tasks=specs, tensors=tensors, predicted_gain=round(predicted_gain, 6),
    )

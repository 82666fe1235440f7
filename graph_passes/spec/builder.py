"""Build fusion-spec objects (graph_passes.spec.model) for tasks and groups of an analysed model."""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import onnx
from onnx import helper

from hexfuse.graph_passes.analysis import structure
from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.tasks import Task
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS
from hexfuse.graph_passes.spec.model import FusedOp, NodeSpec, QuantSpec, TaskSpec, TensorSpec


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
    """(inputs, outputs) of a set of nodes by name: tensors read from outside, tensors used outside."""
    names = analysis.flat.names
    inputs, outputs = structure.boundary(analysis, node_indices)
    return [names[t] for t in inputs], [names[t] for t in outputs]


def _quant_of(analysis: Analysis, index: int) -> QuantSpec | None:
    """The encoding of Q/DQ node ``index`` (None where its parameters are not constants)."""
    cache = analysis.node_quant_specs
    if index not in cache:
        cache[index] = _read_quant(analysis, index)
    return cache[index]


def _read_quant(analysis: Analysis, index: int) -> QuantSpec | None:
    flat = analysis.flat
    ins, op_type = flat.inputs[index], flat.op_types[index]
    scale = flat.constant_value(ins[1]) if len(ins) > 1 and ins[1] >= 0 else None
    zero_id = ins[2] if len(ins) > 2 else -1
    zero = flat.constant_value(zero_id) if zero_id >= 0 else None
    if scale is None or (zero_id >= 0 and zero is None):
        return None
    quantized = ins[0] if op_type == "DequantizeLinear" else flat.outputs[index][0]
    dtype = flat.type(quantized).dtype
    zero_points = tuple(int(v) for v in np.ravel(zero)) if zero is not None else (0,) * int(np.size(scale))
    axis = next((a.i for a in flat.node(index).attribute if a.name == "axis"), 1) if np.size(scale) > 1 else None
    return QuantSpec(dtype, tuple(float(v) for v in np.ravel(scale)), zero_points, axis)


def quant_of(analysis: Analysis, tensor: int) -> QuantSpec | None:
    """Quantization of a tensor a Q produces or a DQ reads; None where they give it different scales or
    zero points (codes written with one and read with another: no one encoding to bake into a kernel)."""
    flat = analysis.flat
    cache = analysis.quant_specs
    if tensor in cache:
        return cache[tensor]
    if not analysis.structures.quantized[tensor]:  # no Q produces it, no DQ with constant parameters reads it
        return None
    definers = [u for u in flat.consumers[tensor] if flat.op_types[u] == "DequantizeLinear" and flat.inputs[u][0] == tensor]
    source = flat.producer[tensor]
    if source >= 0 and flat.op_types[source] == "QuantizeLinear":
        definers.append(source)
    found = {_quant_of(analysis, index) for index in definers if flat.domains[index] in ONNX_DOMAINS} - {None}
    quant = found.pop() if len(found) == 1 else None
    cache[tensor] = quant
    return quant


def tensor_spec(analysis: Analysis, name: str) -> TensorSpec:
    cache = analysis.tensor_specs
    spec = cache.get(name)
    if spec is None:
        flat = analysis.flat
        tensor = flat.ids[name]
        kind = flat.type(tensor)
        if kind is None or kind.dtype is None:
            raise HexfuseError(f"tensor {name!r} has no known tensor type")
        spec = cache[name] = TensorSpec(name, kind.dtype, kind.shape or (), bool(flat.folds_to_constant[tensor]),
                                        quant_of(analysis, tensor))
    return spec


def task_spec(analysis: Analysis, task: Task) -> TaskSpec:
    cached = analysis.task_specs.get(task.id)
    if cached is None:
        cached = analysis.task_specs[task.id] = _task_spec(analysis, task)
    return cached


def _task_spec(analysis: Analysis, task: Task) -> TaskSpec:
    indices = list(analysis.task_body(task).body)
    inputs, outputs = boundary(analysis, indices)
    work = analysis.work(task)
    return TaskSpec(
        id=f"t{task.id}", engine=task.engine.value, nodes=tuple(node_spec(analysis.flat.node(i)) for i in indices),
        inputs=tuple(inputs), outputs=tuple(outputs), macs=work.macs, elements=work.elements,
        bytes_moved=work.bytes_moved,
    )


def group_nodes(analysis: Analysis, tasks: tuple[Task, ...]) -> list[int]:
    """The nodes that move into the fused node's function, task after task, each task in graph order:
    the order of a fused function's body (boundary DQ/Q stay outside, qdq_boundary.py)."""
    return [index for task in tasks for index in analysis.task_body(task).body]


def group_op_type(analysis: Analysis, tasks: tuple[Task, ...], number: int) -> str:
    """A C-identifier op type, unique per group structure and stable for the same model."""
    graph = analysis.flat.model.graph
    names = "\0".join(graph.node[i].name or str(i) for i in group_nodes(analysis, tasks))
    return f"HexFuse_{number}_{hashlib.sha1(names.encode()).hexdigest()[:6]}"


def port_wire(analysis: Analysis, tensor: int, is_input: bool) -> tuple[QuantSpec | None, bool]:
    """(encoding, static) of a fused-op port on the QNN EP: the DQ feeding it (an input) or the Q
    reading it (an output), both left outside the fused node, fold into it (qdq_boundary.py); a
    DQ(initializer) port arrives as a STATIC quantized tensor (weights). The EP folds an output's
    *first* consumer only (udo_fusion.cc): a Q read after another reader leaves the port float32."""
    flat = analysis.flat
    wanted = "DequantizeLinear" if is_input else "QuantizeLinear"
    source = flat.producer[tensor]
    nodes = ([source] if source >= 0 else []) if is_input else flat.consumers[tensor][:1]
    for index in nodes:
        if flat.op_types[index] == wanted and flat.domains[index] in ONNX_DOMAINS:
            wire = _quant_of(analysis, index)
            return wire, is_input and wire is not None and bool(flat.static[flat.inputs[index][0]])
    return None, False


def _port(analysis: Analysis, tensor: TensorSpec, is_input: bool) -> TensorSpec:
    wire, static = port_wire(analysis, analysis.flat.ids[tensor.name], is_input)
    return replace(tensor, wire=wire, static=tensor.static or static) if wire is not None else tensor


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

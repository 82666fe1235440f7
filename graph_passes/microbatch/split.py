"""Split a model into N micro-batches along an axis every op on the path treats row by row.

    x ──> A ──> B ──> y             x ──> Split ─┬─> mb0/A ──> mb0/B ──┐
                             ==>                 └─> mb1/A ──> mb1/B ──┴─> Concat ──> y
                                    (weights, and nodes the split does not reach, stay shared)

The copies of one op share nothing, so slice k's matrix task is independent of slice k-1's vector
task and the pass can pair them, a software pipeline across micro-batches:

    HMX   mb0/A   mb1/A        (mb1/A and mb0/B in one fused node)
    HVX           mb0/B   mb1/B

In a QDQ model the boundary Q of an input and the boundary DQ of an output stay whole (the QNN EP
runs them on the CPU); the split starts after the Q and the join ends before the DQ, each as a QDQ unit
(``_split_node``). ``plan_split`` proves the split exact op by op (axes.py) or returns the reason it is not;
``split_model`` writes the split graph. Node names get the prefix ``mb<k>/`` and the model records the
split in metadata (``hexfuse.micro_batches``) so that reports can say a group came from micro-batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from hexfuse.graph_passes.analysis.sources import MICRO_BATCHES_KEY
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.dataflow import Dataflow
from hexfuse.graph_passes.load.toposort import topological_order_of
from hexfuse.graph_passes.microbatch.axes import Step, propagate
from hexfuse.graph_passes.select.names import NameScope

MAX_MICRO_BATCHES = 64  # each slice copies every op on the path: beyond this the graph only grows


@dataclass(frozen=True)
class SplitPlan:
    count: int
    axis_size: int  # length of the split axis (the same for every split tensor)
    inputs: tuple[tuple[str, int], ...]  # (tensor, axis): a graph input, or the output of its boundary Q
    concats: tuple[tuple[str, int], ...]  # (tensor, axis): a graph output, or the input of its boundary DQ
    axes: dict[str, int]  # every split tensor -> its split axis
    steps: dict[int, Step]  # node index -> how it carries the split
    quantized: dict[str, tuple[str, ...]] = field(default_factory=dict)  # split/joined uint8 tensor -> (scale, zero)

    @property
    def sizes(self) -> list[int]:
        """Slice lengths, as even as possible (16 into 3: 6, 5, 5)."""
        base, extra = divmod(self.axis_size, self.count)
        return [base + (k < extra) for k in range(self.count)]

    def describe(self) -> str:
        where = ", ".join(f"axis {axis} of {name!r}" for name, axis in self.inputs)
        return f"{self.count} micro-batches of {'/'.join(map(str, self.sizes))} rows along {where}"


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _plan_axis(flow: Dataflow, inputs: list[str], axis: int, count: int) -> SplitPlan | str:
    sizes = set()
    for name in inputs:
        shape = flow.shape(name)
        if shape is None:
            return f"input {name!r} has a dynamic shape"
        if axis >= len(shape):
            return f"input {name!r} has rank {len(shape)}"
        sizes.add(shape[axis])
    if len(sizes) != 1:
        return f"the inputs differ in length along it ({sorted(sizes)})"
    size = sizes.pop()
    if size < count:
        return f"length {size} < {count} micro-batches"
    quantized: dict[str, tuple[str, ...]] = {}
    seeds = [_after_boundary_quantize(flow, name, quantized) for name in inputs]
    axes = {name: axis for name in seeds}
    held = _boundary_dequantize(flow, quantized)
    steps: dict[int, Step] = {}
    for index, node in enumerate(flow.nodes):
        in_axes = [axes.get(name) if name else None for name in node.input]
        if all(a is None for a in in_axes) or index in held:
            continue
        unknown = next((n for n in (*node.input, *node.output) if n and flow.shape(n) is None), None)
        if unknown is not None:
            return f"{node.op_type} {node.name!r}: tensor {unknown!r} has no static shape"
        step = propagate(node, in_axes, flow)
        if isinstance(step, str):
            return step
        for name, out_axis in zip(node.output, step.out_axes):
            if not name:
                continue
            shape = flow.shape(name)
            if shape is None or out_axis is None or shape[out_axis] != size:
                return f"{node.op_type} {node.name!r}: output {name!r} does not keep the split axis whole"
            axes[name] = out_axis
        steps[index] = step
    joined = [held.get(flow.producer.get(info.name, -1), info.name) for info in flow.graph.output]
    # (an output that is where a split starts, a graph input or its boundary Q, stays whole as it is)
    concats = tuple((name, axes[name]) for name in dict.fromkeys(joined) if name in axes and name not in seeds)
    if not concats:
        return "no output depends on the inputs"
    quantized = {name: params for name, params in quantized.items() if name in axes}
    return SplitPlan(count, size, tuple((name, axis) for name in seeds), concats, axes, steps, quantized)


def _per_tensor(flow: Dataflow, node: onnx.NodeProto) -> bool:
    scale = flow.constant_value(node.input[1]) if len(node.input) > 1 else None
    return node.domain in ("", "ai.onnx") and scale is not None and scale.size == 1


def _after_boundary_quantize(flow: Dataflow, name: str, quantized: dict[str, tuple[str, ...]]) -> str:
    """Where a graph input's split starts: after a per-tensor QuantizeLinear that alone reads it (the
    QNN EP runs that boundary Q on the CPU; see split_model for how the quantized rows are split)."""
    users = flow.consumers.get(name, [])
    if len(users) == 1 and name not in flow.graph_outputs:
        node = flow.nodes[users[0]]
        if node.op_type == "QuantizeLinear" and node.input[0] == name and _per_tensor(flow, node):
            quantized[node.output[0]] = tuple(node.input[1:3])
            return node.output[0]
    return name


def _boundary_dequantize(flow: Dataflow, quantized: dict[str, tuple[str, ...]]) -> dict[int, str]:
    """Per-tensor DequantizeLinear nodes that only produce a graph output: node index -> its quantized
    input. They stay whole behind the Concat (the mirror of the boundary Q)."""
    held = {}
    for info in flow.graph.output:
        index = flow.producer.get(info.name)
        node = flow.nodes[index] if index is not None else None
        if node is not None and node.op_type == "DequantizeLinear" and _per_tensor(flow, node) \
                and not flow.consumers.get(info.name):
            held[index] = node.input[0]
            quantized[node.input[0]] = tuple(node.input[1:3])
    return held


def plan_split(inferred: onnx.ModelProto, count: int, axis: int | None = None) -> SplitPlan | str:
    """The first axis (batch first) along which every graph input splits exactly, or why none does."""
    if not 2 <= count <= MAX_MICRO_BATCHES:
        raise HexfuseError(f"--micro-batches must be between 2 and {MAX_MICRO_BATCHES}, got {count}")
    if axis is not None and axis < 0:
        raise HexfuseError(f"--split-axis must be a non-negative input axis, got {axis}")
    if any(entry.key == MICRO_BATCHES_KEY for entry in inferred.metadata_props):
        return "the model is already split into micro-batches"
    flow = Dataflow.of(inferred)
    blocked = next((node for node in flow.nodes if _has_subgraph(node)), None)
    if blocked is not None:
        return f"{blocked.op_type} {blocked.name!r} holds a subgraph (control flow is not split)"
    inputs = [info.name for info in flow.graph.input if info.name not in flow.initializers]
    if not inputs:
        return "the model has no input to split"
    ranks = [len(flow.shape(name) or ()) for name in inputs]
    candidates = [axis] if axis is not None else list(range(max(ranks)))
    reasons = []
    for candidate in candidates:
        plan = _plan_axis(flow, inputs, candidate, count)
        if isinstance(plan, SplitPlan):
            return plan
        reasons.append(f"axis {candidate}: {plan}")
    return "no axis splits exactly: " + "; ".join(reasons)


class _Writer:
    """Fresh names for the slices, and one initializer per distinct constant it adds."""

    def __init__(self, model: onnx.ModelProto) -> None:
        self.names = NameScope(model)
        self.sliced: dict[tuple[str, int], str] = {}
        self.constants: dict[tuple[str, bytes, tuple[int, ...]], str] = {}
        self.initializers: list[onnx.TensorProto] = []

    def slice_name(self, name: str, k: int) -> str:
        key = (name, k)
        if key not in self.sliced:
            self.sliced[key] = self.names.fresh(f"mb{k}/{name}")
        return self.sliced[key]

    def constant(self, base: str, value: np.ndarray) -> str:
        key = (base, value.tobytes() + str(value.dtype).encode(), value.shape)  # ([8,4] and [4,8] ones: same bytes)
        if key not in self.constants:
            name = self.names.fresh(base)
            self.constants[key] = name
            self.initializers.append(numpy_helper.from_array(value, name))
        return self.constants[key]


def _split_node(writer: _Writer, plan: SplitPlan, name: str, axis: int) -> list[onnx.NodeProto]:
    """Split ``name`` into the slices; a quantized tensor as a QDQ unit with its own scale and zero point:

        t ──> DQ ──> Split ──> Q ──> mb0/t        Q(DQ(t)) is t exactly. A bare uint8 Split is not a
                           └─> Q ──> mb1/t        QDQ unit: the QNN EP left it and the first layer behind it
                                                  on the CPU (measured on the simulator: outputs off by 5 LSB)
    """
    sizes = writer.constant("hexfuse/micro_batch_sizes", np.array(plan.sizes, np.int64))
    slices = [writer.slice_name(name, k) for k in range(plan.count)]
    label = writer.names.fresh(f"hexfuse/split/{name}")
    params = plan.quantized.get(name)
    if params is None:
        return [helper.make_node("Split", [name, sizes], slices, name=label, axis=axis)]
    real = writer.names.fresh(f"{name}/dequantized")
    floats = [writer.names.fresh(f"{s}/dequantized") for s in slices]
    nodes = [helper.make_node("DequantizeLinear", [name, *params], [real], name=f"{label}/dq"),
             helper.make_node("Split", [real, sizes], floats, name=label, axis=axis)]
    nodes += [helper.make_node("QuantizeLinear", [f, *params], [s], name=f"{label}/q{k}") for k, (f, s) in enumerate(zip(floats, slices))]
    return nodes


def _concat_node(writer: _Writer, plan: SplitPlan, name: str, axis: int) -> list[onnx.NodeProto]:
    """Join the slices into ``name``; a quantized tensor as DQ per slice -> Concat -> Q (see _split_node)."""
    slices = [writer.slice_name(name, k) for k in range(plan.count)]
    label = writer.names.fresh(f"hexfuse/concat/{name}")
    params = plan.quantized.get(name)
    if params is None:
        return [helper.make_node("Concat", slices, [name], name=label, axis=axis)]
    floats = [writer.names.fresh(f"{s}/dequantized") for s in slices]
    real = writer.names.fresh(f"{name}/dequantized")
    nodes = [helper.make_node("DequantizeLinear", [s, *params], [f], name=f"{label}/dq{k}") for k, (s, f) in enumerate(zip(slices, floats))]
    nodes += [helper.make_node("Concat", floats, [real], name=label, axis=axis),
              helper.make_node("QuantizeLinear", [real, *params], [name], name=f"{label}/q")]
    return nodes


def split_model(model: onnx.ModelProto, plan: SplitPlan) -> onnx.ModelProto:
    """``model`` (topologically sorted) with every op on the split path copied once per slice."""
    flow = Dataflow.of(model)
    writer = _Writer(model)
    sizes = plan.sizes
    nodes: list[onnx.NodeProto] = []
    for name, axis in plan.inputs:
        nodes += _split_node(writer, plan, name, axis)
    for index, node in enumerate(model.graph.node):
        step = plan.steps.get(index)
        if step is None:
            nodes.append(node)
            continue
        for k in range(plan.count):
            copy = onnx.NodeProto()
            copy.CopyFrom(node)
            copy.name = writer.names.fresh(f"mb{k}/{node.name or f'{node.op_type}_{index}'}")
            copy.input[:] = [writer.slice_name(n, k) if n in plan.axes else n for n in node.input]
            copy.output[:] = [writer.slice_name(n, k) if n else "" for n in node.output]
            for slot, axis in step.sliced_constants:  # this slice's rows of a per-row constant
                value = np.asarray(flow.constant_value(node.input[slot]))
                start = sum(sizes[:k])
                rows = np.ascontiguousarray(np.take(value, range(start, start + sizes[k]), axis=axis))
                copy.input[slot] = writer.constant(f"{node.input[slot]}/mb{k}", rows)
            if step.shape_entry is not None:
                slot, position = step.shape_entry
                shape = np.array(flow.constant_value(node.input[slot]), np.int64).reshape(-1)
                shape[position] = sizes[k]
                copy.input[slot] = writer.constant(f"{node.input[slot]}/mb{sizes[k]}", shape)
            nodes.append(copy)
    for name, axis in plan.concats:
        nodes += _concat_node(writer, plan, name, axis)
    order = topological_order_of([list(n.input) for n in nodes], [list(n.output) for n in nodes])
    nodes = [nodes[i] for i in order]  # a boundary Q comes before the Split that reads it
    result = onnx.ModelProto()
    result.CopyFrom(model)
    graph = result.graph
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(writer.initializers)
    kept = [info for info in graph.value_info if info.name not in plan.axes]  # shapes of the slices are inferred anew
    del graph.value_info[:]
    graph.value_info.extend(kept)
    entry = result.metadata_props.add()
    entry.key = MICRO_BATCHES_KEY
    entry.value = json.dumps({"count": plan.count, "sizes": sizes, "inputs": dict(plan.inputs), "outputs": dict(plan.concats)},
                             sort_keys=True)
    try:
        onnx.checker.check_model(result)
        return onnx.shape_inference.infer_shapes(result, check_type=True, strict_mode=True, data_prop=True)
    except Exception as exc:  # checker and inference raise several types from C++
        raise HexfuseError(f"internal error: the split model is invalid: {str(exc).splitlines()[0]}") from None

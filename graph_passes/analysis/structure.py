"""Structure keys, computed from the flat graph without building specs.

    task key    a task up to renaming: its ops and attributes, each tensor numbered by first
                appearance with its type (shape, dtype, static, quantized), and which numbers are the
                task's inputs and outputs. Equal keys cost the same, so the scorer runs once per key
                (the same pair in every layer of an LM is scored once).
    group key   the tasks' keys, which task inputs are the same tensor, and what the op package may
                bake into a kernel: quantization parameters and the values of small integer constants
                (shapes, axes, pads). Equal keys mean identical function bodies and signatures up to
                renaming, so such groups share one function and one op type. Weights stay fused-node
                inputs, so they may differ.

Why the group key is exact: the tasks of a group are independent, so no task reads or writes a tensor
another task produces; the only tensors two tasks can share are inputs, and the key lists them.
Keys are interned to small integers; the task boundary is computed here too (the keys and the specs
both need it).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, cached_property

import numpy as np
import onnx

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS
from hexfuse.graph_passes.analysis.tasks import Task

SMALL_CONSTANT = 64  # integer constants up to this many elements are part of the group key


@cache
def _takes_attributes(op_type: str, domain: str, opset: int) -> bool:
    """False only where the op's schema at the model's opset defines no attribute at all."""
    if domain not in ONNX_DOMAINS:
        return True
    try:
        return bool(onnx.defs.get_schema(op_type, opset, domain).attributes)
    except onnx.defs.SchemaError:
        return True  # unknown op: read whatever it carries


class Structures:
    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.flat = analysis.flat
        self.opset = next((o.version for o in self.flat.model.opset_import if o.domain in ONNX_DOMAINS), 0)
        self._intern: dict[object, int] = {}
        self._tasks: dict[int, int] = {}
        self._tensors: dict[int, tuple[int, ...]] = {}  # task -> its tensors in numbering order
        self._shared: dict[int, int] = {}  # task -> key with baked values
        self._groups: dict[tuple[int, ...], int] = {}
        self._boundaries: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._baked_values: dict[int, object] = {}

    def _id(self, key: object) -> int:
        value = self._intern.get(key)
        if value is None:
            value = self._intern[key] = len(self._intern)
        return value

    # -- facts per tensor and node ---------------------------------------------------------------
    @cached_property
    def quantized(self) -> bytearray:
        """Tensors a QuantizeLinear produces or a DequantizeLinear reads, with constant parameters
        (the tensors spec_builder gives a QuantSpec)."""
        flat = self.flat
        marks = bytearray(len(flat.names))
        for index, op_type in enumerate(flat.op_types):
            if op_type in ("QuantizeLinear", "DequantizeLinear") and flat.domains[index] in ONNX_DOMAINS:
                ins = flat.inputs[index]
                if len(ins) < 2 or ins[1] < 0 or not flat.is_constant(ins[1]):
                    continue
                if len(ins) > 2 and ins[2] >= 0 and not flat.is_constant(ins[2]):
                    continue
                marks[ins[0] if op_type == "DequantizeLinear" else flat.outputs[index][0]] = 1
        return marks

    @cached_property
    def _signatures(self) -> list[int]:
        """Per tensor: type id, static and quantized flags in one int (unknown types stay negative)."""
        flat = self.flat
        return [(kind << 2) | (static << 1) | quant
                for kind, static, quant in zip(flat.type_of, flat.folds_to_constant, self.quantized)]

    @cached_property
    def _may_bake(self) -> bytearray:
        """Tensors whose values a kernel generator might bake: quantized ones and constants."""
        flat = self.flat
        marks = bytearray(self.quantized)
        for tensor, static in enumerate(flat.static):
            if static:
                marks[tensor] = 1
        for index, op_type in enumerate(flat.op_types):
            if op_type == "Constant":
                for tensor in flat.outputs[index]:
                    if tensor >= 0:
                        marks[tensor] = 1
        return marks

    @cached_property
    def _attribute_keys(self) -> list[int]:
        """Per node: its attributes up to renaming, -1 where it has none that count."""
        flat = self.flat
        keys = [-1] * flat.node_count
        for index, node in enumerate(flat.nodes):
            attributes = node.attribute
            # (where the schema defines no attribute at all, the checker refuses any: none count)
            if attributes and _takes_attributes(flat.op_types[index], flat.domains[index], self.opset):
                keys[index] = self._id(("attrs", tuple(a.SerializeToString() for a in attributes)))
        return keys

    # -- tasks -----------------------------------------------------------------------------------
    def boundary(self, task: Task) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(inputs, outputs) of a task: tensors read from outside, tensors used outside (tensor ids)."""
        cached = self._boundaries.get(task.id)
        if cached is None:
            cached = self._boundaries[task.id] = boundary(self.analysis, self.analysis.task_body(task).body)
        return cached

    def task(self, task: Task) -> int:
        """The task up to renaming, without baked values: the scoring key."""
        key = self._tasks.get(task.id)
        if key is None:
            key = self._tasks[task.id] = self._task(task)
        return key

    def _task(self, task: Task) -> int:
        flat, attributes = self.flat, self._attribute_keys
        op_types, domains, inputs, outputs = flat.op_types, flat.domains, flat.inputs, flat.outputs
        body = self.analysis.task_body(task).body
        local: dict[int, int] = {}
        number = local.setdefault  # len(local) is read first: a new tensor gets the next number
        rows = [(op_types[i], domains[i], attributes[i],
                 tuple([number(t, len(local)) if t >= 0 else -1 for t in inputs[i]]),
                 tuple([number(t, len(local)) if t >= 0 else -1 for t in outputs[i]]))
                for i in body]
        ins, outs = self.boundary(task)
        signatures = self._signatures
        tensors = self._tensors[task.id] = tuple(local)  # dicts keep first-appearance order
        return self._id((task.engine.value, tuple(rows), tuple(map(signatures.__getitem__, tensors)),
                         tuple(map(local.__getitem__, ins)), tuple(map(local.__getitem__, outs))))

    def code(self, task: Task) -> int:
        """The task up to renaming, with everything the generated code depends on: equal keys, equal code."""
        return self._task_shared(task)

    def _task_shared(self, task: Task) -> int:
        """The task key with the values a kernel may bake (module docstring)."""
        key = self._shared.get(task.id)
        if key is None:
            base = self.task(task)
            may_bake = self._may_bake
            baked = tuple((n, self._baked(t)) for n, t in enumerate(self._tensors[task.id]) if may_bake[t])
            # Port encodings (the boundary DQ/Q folded into the port on the QNN EP): the HTP expansion
            # writes them into its rules where an inner op must carry one (op_package/qnn_ops.py).
            wires: tuple = ()  # (without Q/DQ in the model, no port carries an encoding)
            if self.analysis.has_qdq:
                ins, outs = self.boundary(task)
                wires = (tuple(self._wire(t, True) for t in ins), tuple(self._wire(t, False) for t in outs))
            key = self._shared[task.id] = self._id((base, baked, wires))
        return key

    # -- groups ----------------------------------------------------------------------------------
    def group_io(self, tasks: Sequence[Task]) -> tuple[list[int], list[int]]:
        """The fused node's inputs (task inputs in task order, shared ones once) and outputs."""
        bounds = [self.boundary(task) for task in tasks]
        inputs = list(dict.fromkeys(t for ins, _ in bounds for t in ins))
        outputs = [t for _, outs in bounds for t in outs]
        return inputs, outputs

    def group(self, tasks: Sequence[Task]) -> int:
        """The group up to renaming, baked values included: equal keys may share one op type."""
        ids = tuple(task.id for task in tasks)
        key = self._groups.get(ids)
        if key is None:
            first: dict[int, tuple[int, int]] = {}
            shared = []  # (task, input position, first task, its position) for inputs read by two tasks
            for j, task in enumerate(tasks):
                for position, tensor in enumerate(self.boundary(task)[0]):
                    seen = first.setdefault(tensor, (j, position))
                    if seen[0] != j:
                        shared.append((j, position, *seen))
            key = self._groups[ids] = self._id(("group", tuple(map(self._task_shared, tasks)), tuple(shared)))
        return key

    def _wire(self, tensor: int, is_input: bool) -> object:
        from hexfuse.graph_passes.spec.builder import port_wire  # spec_builder imports this module

        return port_wire(self.analysis, tensor, is_input)

    def _baked(self, tensor: int) -> object:
        if tensor in self._baked_values:
            return self._baked_values[tensor]
        from hexfuse.graph_passes.spec.builder import quant_of  # spec_builder imports this module

        flat = self.flat
        quant = quant_of(self.analysis, tensor) if self.quantized[tensor] else None
        value = None
        kind = flat.type(tensor)
        if (kind is not None and kind.dtype is not None and kind.elements <= SMALL_CONSTANT
                and np.dtype(kind.dtype).kind in "iub" and flat.is_constant(tensor)):
            array = flat.constant_value(tensor)
            value = None if array is None else (str(array.dtype), array.shape, array.tobytes())
        baked = self._baked_values[tensor] = (quant, value)
        return baked


def boundary(analysis: Analysis, node_indices: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(inputs, outputs) of a set of nodes: tensors read from outside, tensors used outside (or graph outputs)."""
    flat = analysis.flat
    inputs_of, outputs_of, consumers, graph_outputs = flat.inputs, flat.outputs, flat.consumers, flat.graph_outputs
    if len(node_indices) == 1:  # (a node never reads its own output: the graph is acyclic)
        index = node_indices[0]
        ins = tuple(dict.fromkeys([t for t in inputs_of[index] if t >= 0]))
        return ins, tuple([t for t in outputs_of[index] if t >= 0 and (consumers[t] or t in graph_outputs)])
    inside = set(node_indices)
    produced = {t for i in node_indices for t in outputs_of[i] if t >= 0}
    inputs: dict[int, None] = {}
    outputs: dict[int, None] = {}
    for index in node_indices:
        for tensor in inputs_of[index]:
            if tensor >= 0 and tensor not in produced:
                inputs[tensor] = None
        for tensor in outputs_of[index]:
            if tensor >= 0 and (tensor in graph_outputs or any(user not in inside for user in consumers[tensor])):
                outputs[tensor] = None
    return tuple(inputs), tuple(outputs)

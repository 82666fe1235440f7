"""Structure keys, computed from the flat graph without building specs.

    task key    engine, ops, attributes and tensor types (shape, dtype, static, quantized) of a task,
                without names or wiring: equal keys cost the same, so the scorer runs once per key
                (the same pair in every layer of an LM is scored once)
    group key   a group up to renaming: every tensor is replaced by its first-appearance number, so
                equal keys mean identical function bodies and signatures, and groups with equal keys
                share one function and one op type. Tensors also carry what the op package may bake
                into a kernel: quantization parameters and the values of small integer constants
                (shapes, axes, pads). Weights stay fused-node inputs, so they may differ.

Both are interned to small integers; the task boundary (inputs read from outside, outputs used
outside, in node order) is computed here too, since both keys and the specs need it.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache, cached_property

import numpy as np
import onnx

from hexfuse.graph_passes.analysis import Analysis
from hexfuse.graph_passes.flat import ONNX_DOMAINS
from hexfuse.graph_passes.tasks import Task

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
        self._intern: dict[object, int] = {}
        self._attributes: dict[int, int] = {}
        self._nodes: dict[int, int] = {}
        self._tasks: dict[int, int] = {}
        self._groups: dict[tuple[int, ...], int] = {}
        self._boundaries: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._quantized: bytearray | None = None
        self._values: dict[int, object] = {}
        self.opset = next((o.version for o in self.flat.model.opset_import if o.domain in ONNX_DOMAINS), 0)

    def _id(self, key: object) -> int:
        value = self._intern.get(key)
        if value is None:
            value = self._intern[key] = len(self._intern)
        return value

    # -- facts per tensor and node ---------------------------------------------------------------
    def quantized(self) -> bytearray:
        """Tensors a QuantizeLinear produces or a DequantizeLinear reads, with constant parameters."""
        if self._quantized is None:
            flat = self.flat
            marks = bytearray(len(flat.names))
            for index, op_type in enumerate(flat.op_types):
                if op_type in ("QuantizeLinear", "DequantizeLinear") and flat.domains[index] in ONNX_DOMAINS:
                    ins = flat.inputs[index]
                    if len(ins) < 2 or ins[1] < 0 or not flat.is_constant(ins[1]):
                        continue  # spec_builder gives no QuantSpec without a constant scale ...
                    if len(ins) > 2 and ins[2] >= 0 and not flat.is_constant(ins[2]):
                        continue  # ... or zero point
                    marks[ins[0] if op_type == "DequantizeLinear" else flat.outputs[index][0]] = 1
            self._quantized = marks
        return self._quantized

    def attributes(self, index: int) -> int:
        key = self._attributes.get(index)
        if key is None:
            flat = self.flat
            if _takes_attributes(flat.op_types[index], flat.domains[index], self.opset):
                node = flat.nodes[index]
                key = self._id(("attrs", tuple(a.SerializeToString() for a in node.attribute)))
            else:
                key = -1  # the schema defines no attribute, and the checker refuses unknown ones
            self._attributes[index] = key
        return key

    @cached_property
    def _signatures(self) -> list[int]:
        """Per tensor: type id, static and quantized flags in one int (-1 ids stay negative)."""
        flat, quantized = self.flat, self.quantized()
        return [(kind << 2) | (static << 1) | quant for kind, static, quant in zip(flat.type_of, flat.static, quantized)]

    def _tensor(self, tensor: int) -> int | None:
        return self._signatures[tensor] if tensor >= 0 else None

    def node(self, index: int) -> int:
        key = self._nodes.get(index)
        if key is None:
            flat, signatures = self.flat, self._signatures
            key = self._nodes[index] = self._id((
                flat.op_types[index], flat.domains[index], self.attributes(index),
                tuple(signatures[t] if t >= 0 else None for t in flat.inputs[index]),
                tuple(signatures[t] if t >= 0 else None for t in flat.outputs[index])))
        return key

    # -- tasks -----------------------------------------------------------------------------------
    def boundary(self, task: Task) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(inputs, outputs) of a task: tensors read from outside, tensors used outside (tensor ids)."""
        cached = self._boundaries.get(task.id)
        if cached is None:
            cached = self._boundaries[task.id] = boundary(self.analysis, self.analysis.task_nodes(task))
        return cached

    def task(self, task: Task) -> int:
        key = self._tasks.get(task.id)
        if key is None:
            inputs, outputs = self.boundary(task)
            key = self._tasks[task.id] = self._id((
                task.engine.value, tuple(self.node(i) for i in self.analysis.task_nodes(task)),
                tuple(map(self._tensor, inputs)), tuple(map(self._tensor, outputs))))
        return key

    # -- groups ----------------------------------------------------------------------------------
    def group_io(self, tasks: Sequence[Task]) -> tuple[list[int], list[int]]:
        """The fused node's inputs (task inputs in task order, shared ones once) and outputs."""
        bounds = [self.boundary(task) for task in tasks]
        inputs = list(dict.fromkeys(t for ins, _ in bounds for t in ins))
        outputs = [t for _, outs in bounds for t in outs]
        return inputs, outputs

    def group(self, tasks: Sequence[Task]) -> int:
        """The group up to renaming (module docstring): equal keys may share one op type."""
        ids = tuple(task.id for task in tasks)
        key = self._groups.get(ids)
        if key is None:
            key = self._groups[ids] = self._group(tasks)
        return key

    def _group(self, tasks: Sequence[Task]) -> int:
        flat, local = self.flat, {}

        def number(tensor: int) -> int:
            if tensor < 0:
                return -1
            found = local.get(tensor)
            if found is None:
                found = local[tensor] = len(local)
            return found

        body = []
        for task in tasks:
            body.append(task.engine.value)  # separates tasks
            for index in self.analysis.task_nodes(task):
                # the node key holds op, attributes and tensor types; the numbers hold the wiring
                body.append((self.node(index), tuple(map(number, flat.inputs[index])),
                             tuple(map(number, flat.outputs[index]))))
        inputs, outputs = self.group_io(tasks)
        signature = (tuple(map(number, inputs)), tuple(map(number, outputs)))
        baked = tuple(map(self._baked, local))  # dicts keep first-appearance order
        return self._id(("group", tuple(body), signature, baked))

    def quant_params(self) -> dict[str, object]:
        from hexfuse.graph_passes.spec_builder import quant_params  # spec_builder imports this module

        return quant_params(self.analysis)

    def _baked(self, tensor: int) -> object:
        """What a kernel generator may bake in besides types: quantization and small integer constants."""
        if tensor in self._values:
            return self._values[tensor]
        flat = self.flat
        quant = self.quant_params().get(flat.names[tensor]) if self.quantized()[tensor] else None
        value = None
        kind = flat.type(tensor)
        if (kind is not None and kind.dtype is not None and kind.elements <= SMALL_CONSTANT
                and np.dtype(kind.dtype).kind in "iub" and flat.is_constant(tensor)):
            array = flat.constant_value(tensor)
            value = None if array is None else (str(array.dtype), array.shape, array.tobytes())
        baked = self._values[tensor] = (quant, value) if quant is not None or value is not None else None
        return baked


def boundary(analysis: Analysis, node_indices: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(inputs, outputs) of a set of nodes: tensors read from outside, tensors used outside (or graph outputs)."""
    flat = analysis.flat
    inside = set(node_indices)
    produced = {t for i in node_indices for t in flat.outputs[i] if t >= 0}
    inputs: dict[int, None] = {}
    outputs: dict[int, None] = {}
    for index in node_indices:
        for tensor in flat.inputs[index]:
            if tensor >= 0 and tensor not in produced:
                inputs[tensor] = None
        for tensor in flat.outputs[index]:
            if tensor < 0:
                continue
            if tensor in flat.graph_outputs or any(user not in inside for user in flat.consumers[tensor]):
                outputs[tensor] = None
    return tuple(inputs), tuple(outputs)

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
from dataclasses import dataclass
from functools import cache, cached_property
from itertools import repeat
from operator import attrgetter, itemgetter

import numpy as np
import onnx

from hexfuse.graph_passes.analysis.facts import Analysis
from hexfuse.graph_passes.analysis.tasks import Task
from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS, TensorType
from hexfuse.graph_passes.graph.ports import ports

SMALL_CONSTANT = 64  # integer constants up to this many elements are part of the group key

_task_id = attrgetter("id")
# A task's engine as its value, for keys: hashing an Enum member runs Python code, and so does its
# ``value`` property; ``_value_`` is the member's plain attribute (enum's documented sunder name).
engine_value = attrgetter("engine._value_")


@cache
def _takes_attributes(op_type: str, domain: str, opset: int) -> bool:
    """False only where the op's schema at the model's opset defines no attribute at all."""
    if domain not in ONNX_DOMAINS:
        return True
    try:
        return bool(onnx.defs.get_schema(op_type, opset, domain).attributes)
    except onnx.defs.SchemaError:
        return True  # unknown op: read whatever it carries


def _small_integer(kind: TensorType) -> bool:
    try:
        return kind.dtype is not None and kind.elements <= SMALL_CONSTANT and np.dtype(kind.dtype).kind in "iub"
    except TypeError:  # a dtype numpy does not know by name: not an integer
        return False


@cache
def _hash_factors(length: int) -> np.ndarray:
    """Fixed odd 64-bit factors, one per column: splitmix64 of 1 .. length (numpy's random module is a
    0.01 s import the pass need not pay)."""
    z = np.arange(1, length + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31)) | np.uint64(1)


def _row_hashes(block: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each row of a 2-D integer array (multiply-add with fixed odd factors, modulo 2**64)."""
    return (block.astype(np.uint64) * _hash_factors(block.shape[1])).sum(axis=1, dtype=np.uint64)


@dataclass(frozen=True)
class _Batch:
    """What one ``prepare`` call found, as ragged arrays (ragged.py) with one row per task, turned into
    tuples per task on demand (most tasks never need their boundary as tuples)."""

    inputs: np.ndarray
    input_at: np.ndarray
    outputs: np.ndarray
    output_at: np.ndarray
    bake_numbers: np.ndarray  # per task: the numbers (first appearance) of the tensors a kernel may bake
    bake_tensors: np.ndarray  # and those tensors
    bake_at: np.ndarray

    def boundary(self, row: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (tuple(self.inputs[self.input_at[row]:self.input_at[row + 1]].tolist()),
                tuple(self.outputs[self.output_at[row]:self.output_at[row + 1]].tolist()))


class Structures:
    def __init__(self, analysis: Analysis) -> None:
        self.analysis = analysis
        self.flat = analysis.flat
        self.opset = next((o.version for o in self.flat.model.opset_import if o.domain in ONNX_DOMAINS), 0)
        self._attribute_key_array = np.full(self.flat.node_count, -2, dtype=np.int64)  # -2: not read yet
        self._intern: dict[object, int] = {}
        self._tasks: dict[int, int] = {}
        self._prepared: dict[int, tuple[_Batch, int]] = {}  # task -> its batch of ``prepare`` and row there
        self._shared: dict[int, int] = {}  # task -> key with baked values
        self._groups: dict[tuple[int, ...], int] = {}
        self._boundaries: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
        self._baked_array = np.full(len(self.flat.names), -1, dtype=np.int64)  # tensor -> _baked, -1: not known yet
        self._wires = {flag: np.full(len(self.flat.names), -1, dtype=np.int64) for flag in (True, False)}  # by is_input

    def _id(self, key: object) -> int:
        value = self._intern.get(key)
        if value is None:
            value = self._intern[key] = len(self._intern)
        return value

    def _intern_rows(self, tag: str, values: np.ndarray, ptr: np.ndarray) -> list[int]:
        """The interned id of each row of a ragged integer array: equal rows, equal ids. One Python step
        per distinct row: rows of one length are grouped by a hash and then compared whole."""
        lengths = np.diff(ptr)
        ids = np.empty(len(lengths), dtype=np.int64)
        for length in ragged.distinct(lengths).tolist():
            rows = np.flatnonzero(lengths == length)
            block = values[ptr[rows][:, None] + np.arange(length, dtype=np.int64)]
            _, first, inverse = np.unique(_row_hashes(block), return_index=True, return_inverse=True)
            if not np.array_equal(block, block[first[inverse]]):  # a hash collision: group by the bytes
                seen: dict[bytes, int] = {}
                first = np.array([seen.setdefault(row.tobytes(), i) for i, row in enumerate(block)], dtype=np.int64)
                first, inverse = np.unique(first, return_inverse=True)
            distinct = np.array([self._id((tag, block[i].tobytes())) for i in first.tolist()], dtype=np.int64)
            ids[rows] = distinct[inverse.reshape(-1)]
        return ids.tolist()

    # -- facts per tensor and node ---------------------------------------------------------------
    @cached_property
    def quantized(self) -> bytearray:
        """Tensors a QuantizeLinear produces or a DequantizeLinear reads, with constant parameters
        (the tensors spec_builder gives a QuantSpec)."""
        flat = self.flat
        marks = bytearray(len(flat.names))
        qdq = flat.op_marks(lambda op, domain: op in ("QuantizeLinear", "DequantizeLinear") and domain in ONNX_DOMAINS)
        for index in np.flatnonzero(qdq).tolist():
            ins = flat.inputs[index]
            if len(ins) < 2 or ins[1] < 0 or not flat.is_constant(ins[1]):
                continue
            if len(ins) > 2 and ins[2] >= 0 and not flat.is_constant(ins[2]):
                continue
            marks[ins[0] if flat.op_types[index] == "DequantizeLinear" else flat.outputs[index][0]] = 1
        return marks

    @cached_property
    def _quantized_marks(self) -> np.ndarray:
        """``quantized`` as a bool array."""
        return np.frombuffer(bytes(self.quantized), dtype=np.uint8).astype(bool)

    @cached_property
    def _signatures(self) -> np.ndarray:
        """Per tensor: type id, static and quantized flags in one int (unknown types stay negative)."""
        flat = self.flat
        kinds = np.array(flat.type_of, dtype=np.int64)
        static = np.frombuffer(bytes(flat.folds_to_constant), dtype=np.uint8).astype(np.int64)
        quant = self._quantized_marks.astype(np.int64)
        return (kinds << 2) | (static << 1) | quant

    @cached_property
    def _may_bake(self) -> np.ndarray:
        """Tensors whose values a kernel generator might bake: quantized ones and constants."""
        flat = self.flat
        marks = self._quantized_marks.copy()
        marks |= np.frombuffer(bytes(flat.static), dtype=np.uint8).astype(bool)
        for index in np.flatnonzero(flat.op_marks(lambda op, _: op == "Constant")).tolist():
            for tensor in flat.outputs[index]:
                if tensor >= 0:
                    marks[tensor] = True
        return marks

    def _attribute_keys(self, nodes: np.ndarray) -> np.ndarray:
        """Per given node: its attributes up to renaming, -1 where it has none that count. Computed on
        first use per node (serializing every attribute of a model costs as much as the keys)."""
        flat, keys = self.flat, self._attribute_key_array
        missing = nodes[keys[nodes] == -2]
        if len(missing):
            missing = ragged.distinct(missing)
            # Where the schema defines no attribute at all, the checker refuses any: none count, and
            # the node's protobuf is not touched (most nodes of a model: MatMul, Add, Mul, ...).
            takes = flat.op_marks(lambda op, domain: _takes_attributes(op, domain, self.opset))[missing]
            keys[missing[~takes]] = -1
            graph_nodes, read = flat.nodes, missing[takes]
            found = []
            for index in read.tolist():
                attributes = graph_nodes[index].attribute
                found.append(self._id(("attrs", tuple([a.SerializeToString() for a in attributes]))) if attributes else -1)
            keys[read] = found
        return keys[nodes]

    @cached_property
    def _node_ops(self) -> np.ndarray:
        """Per node: its op (type and domain) as an interned id."""
        ops, op_index = self.flat.op_table
        return np.array([self._id(("op", *op)) for op in ops], dtype=np.int64)[op_index]

    @cached_property
    def _small_integer_types(self) -> np.ndarray:
        """Per type id, and last for an unknown type (-1): an integer type of at most SMALL_CONSTANT
        elements, whose constant values a kernel may bake."""
        return np.append(np.array([_small_integer(kind) for kind in self.flat.types], dtype=bool), False)

    @cached_property
    def _graph_outputs(self) -> np.ndarray:
        outputs = np.zeros(len(self.flat.names), dtype=bool)
        outputs[list(self.flat.graph_outputs)] = True
        return outputs

    # -- tasks -----------------------------------------------------------------------------------
    def boundary(self, task: Task) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(inputs, outputs) of a task: tensors read from outside, tensors used outside (tensor ids)."""
        cached = self._boundaries.get(task.id)
        if cached is None:
            if task.id not in self._prepared:
                self.prepare((task,))
            batch, row = self._prepared[task.id]
            cached = self._boundaries[task.id] = batch.boundary(row)
        return cached

    def task(self, task: Task) -> int:
        """The task up to renaming, without baked values: the scoring key."""
        if task.id not in self._tasks:
            self.prepare((task,))
        return self._tasks[task.id]

    def task_keys(self, tasks: Sequence[Task]) -> list[int]:
        """``task`` of many tasks."""
        keys, ids = self._tasks, list(map(_task_id, tasks))
        if not keys.keys() >= set(ids):
            self.prepare(tasks)
        return list(map(keys.__getitem__, ids))

    def prepare(self, tasks: Sequence[Task]) -> None:
        """Keys, boundaries and bakeable tensors of many tasks at once, as array processing over the
        flat graph (ragged.py): numpy steps over every port of every task, one Python step per task.

        A task's key is its bytes: engine, node count; per body node its op, attribute key, input and
        output counts and the numbers of its ports' tensors (numbered by first appearance, -1 for an
        omitted input); the numbered tensors' signatures; the numbers of its inputs; of its outputs.
        Every list is preceded by its length, so equal bytes mean equal structure."""
        todo = [task for task in tasks if task.id not in self._tasks]
        if not todo:
            return
        n = len(todo)
        count = len(self.flat.names)
        body_ptr, body = self.analysis.task_bodies(todo)
        node_task = np.repeat(np.arange(n, dtype=np.int64), np.diff(body_ptr))
        table = ports(self.flat, body_ptr, body)
        tensors, slot_node, slot_task, rank, valid = table.tensors, table.node, table.part, table.rank, table.valid
        port_counts, input_counts = table.port_counts, table.input_counts
        keys = slot_task * count + tensors

        # Tensor numbers: the order of first appearance within the task.
        unique, first, inverse = np.unique(keys[valid], return_index=True, return_inverse=True)
        unique_task = unique // count
        order = np.lexsort((first, unique_task))
        numbered_ptr = ragged.segments(unique_task[order], n)
        numbers = np.empty(len(unique), dtype=np.int64)
        numbers[order] = np.arange(len(unique), dtype=np.int64) - numbered_ptr[unique_task[order]]
        local = np.full(len(tensors), -1, dtype=np.int64)
        local[valid] = numbers[inverse]
        numbered = unique[order] % count  # per task (numbered_ptr): its tensors in number order

        # Boundary: inputs read from outside in order of first read; outputs used outside or by the graph.
        produced = table.writes
        read_at = np.flatnonzero(table.outside_reads(count))
        _, first_read = np.unique(keys[read_at], return_index=True)
        ins_at = np.sort(read_at[first_read])  # slots are task-major: sorted is per task, in read order
        outs_at = np.flatnonzero(produced)
        owner = np.full(self.flat.node_count, -1, dtype=np.int64)
        owner[body] = node_task
        consumer_ptr, consumer_ids = self.flat.consumer_arrays
        users, user_of = ragged.take(consumer_ptr, consumer_ids, tensors[outs_at])
        outside = np.bincount(user_of, weights=owner[users] != slot_task[outs_at][user_of], minlength=len(outs_at)) > 0
        signatures, may_bake, graph_output = self._signatures, self._may_bake, self._graph_outputs
        outs_at = outs_at[outside | graph_output[tensors[outs_at]]]

        # The key's parts, each task-major; a stable sort by task lays each task's parts end to end.
        rows_at = ragged.offsets(4 + port_counts)
        rows = np.empty(int(rows_at[-1]), dtype=np.int64)
        heads = rows_at[:-1]
        rows[heads], rows[heads + 1] = self._node_ops[body], self._attribute_keys(body)
        rows[heads + 2] = input_counts
        rows[heads + 3] = port_counts - input_counts
        rows[heads[slot_node] + 4 + rank] = local
        engines = self._engine_ids(todo)
        per_task = np.arange(n, dtype=np.int64)
        ins_task, outs_task = slot_task[ins_at], slot_task[outs_at]
        parts = [(engines, per_task), (np.diff(body_ptr), per_task),
                 (rows, np.repeat(node_task, 4 + port_counts)),
                 (np.diff(numbered_ptr), per_task), (signatures[numbered], unique_task[order]),
                 (np.bincount(ins_task, minlength=n), per_task), (local[ins_at], ins_task),
                 (np.bincount(outs_task, minlength=n), per_task), (local[outs_at], outs_task)]
        blob_at, blobs = ragged.by_owner(parts, n)
        bake = may_bake[numbered]
        batch = _Batch(tensors[ins_at], ragged.segments(ins_task, n), tensors[outs_at], ragged.segments(outs_task, n),
                       (np.arange(len(numbered), dtype=np.int64) - numbered_ptr[unique_task[order]])[bake],
                       numbered[bake], ragged.segments(unique_task[order][bake], n))
        ids = [task.id for task in todo]
        self._tasks.update(zip(ids, self._intern_rows("task", blobs, blob_at)))
        self._prepared.update(zip(ids, zip(repeat(batch), range(n))))

    def _engine_ids(self, tasks: Sequence[Task]) -> np.ndarray:
        """Per task: its engine, interned (by value: see engine_value)."""
        values = list(map(engine_value, tasks))
        ids = {value: self._id(("engine", value)) for value in set(values)}
        return np.fromiter(map(ids.__getitem__, values), dtype=np.int64, count=len(values))

    def code(self, task: Task) -> int:
        """The task up to renaming, with everything the generated code depends on: equal keys, equal code."""
        return self.codes((task,))[0]

    def codes(self, tasks: Sequence[Task]) -> list[int]:
        """``code`` of many tasks: the task key with the values a kernel may bake (module docstring) and,
        in a quantized model, the port encodings (the boundary DQ/Q folded into the port on the QNN EP:
        the HTP expansion writes them into its rules where an inner op must carry one, op_package/qnn_ops.py).
        A task's code is its row of ints: task key; count, then (number, baked value id) per bakeable
        tensor; count and wire id per input; count and wire id per output."""
        shared = self._shared
        ids = list(map(_task_id, tasks))
        todo = {task_id: task for task_id, task in zip(ids, tasks) if task_id not in shared}
        if not todo:
            return [shared[task_id] for task_id in ids]
        self.prepare(list(todo.values()))
        for batch, group, rows in self._rows_by_batch(list(todo)):
            per_task = np.arange(len(group), dtype=np.int64)
            tensors, owner = ragged.take(batch.bake_at, batch.bake_tensors, rows)
            numbers, _ = ragged.take(batch.bake_at, batch.bake_numbers, rows)
            pairs = np.empty(2 * len(tensors), dtype=np.int64)
            pairs[0::2], pairs[1::2] = numbers, self._baked_ids(tensors)
            parts = [(np.fromiter(map(self._tasks.__getitem__, group), dtype=np.int64, count=len(group)), per_task),
                     (np.bincount(owner, minlength=len(group)), per_task), (pairs, np.repeat(owner, 2))]
            if self.analysis.has_qdq:  # (without Q/DQ in the model, no port carries an encoding)
                for ptr, values, is_input in ((batch.input_at, batch.inputs, True), (batch.output_at, batch.outputs, False)):
                    ports, port_owner = ragged.take(ptr, values, rows)
                    parts += [(np.bincount(port_owner, minlength=len(group)), per_task),
                              (self._wire_ids(ports, is_input), port_owner)]
            code_at, code_rows = ragged.by_owner(parts, len(group))
            keys = self._intern_rows("code", code_rows, code_at)
            shared.update(zip(group, keys))
        return [shared[task_id] for task_id in ids]

    def _rows_by_batch(self, ids: list[int]) -> list[tuple[_Batch, list[int], np.ndarray]]:
        """Prepared tasks grouped by the ``prepare`` call that found them: (its batch, their task ids,
        their rows there). Usually one batch."""
        entries = list(map(self._prepared.__getitem__, ids))
        batches = list(map(itemgetter(0), entries))
        rows = np.fromiter(map(itemgetter(1), entries), dtype=np.int64, count=len(entries))
        distinct = dict(zip(map(id, batches), batches))
        if len(distinct) == 1:
            return [(batches[0], ids, rows)]
        owner = np.fromiter(map(id, batches), dtype=np.int64, count=len(batches))  # (an id fits: an address)
        grouped = []
        for key, batch in distinct.items():
            mine = np.flatnonzero(owner == key)
            grouped.append((batch, [ids[k] for k in mine.tolist()], rows[mine]))
        return grouped

    # -- groups ----------------------------------------------------------------------------------
    def group_io(self, tasks: Sequence[Task]) -> tuple[list[int], list[int]]:
        """The fused node's inputs (task inputs in task order, shared ones once) and outputs."""
        bounds = [self.boundary(task) for task in tasks]
        inputs = list(dict.fromkeys(t for ins, _ in bounds for t in ins))
        outputs = [t for _, outs in bounds for t in outs]
        return inputs, outputs

    def groups(self, groups: Sequence[Sequence[Task]]) -> list[int]:
        """``group`` of many groups (their tasks' codes computed at once)."""
        codes = iter(self.codes([task for tasks in groups for task in tasks]))
        return [self.group(tasks, tuple([next(codes) for _ in tasks])) for tasks in groups]

    def group(self, tasks: Sequence[Task], codes: tuple[int, ...] | None = None) -> int:
        """The group up to renaming, baked values included: equal keys may share one op type.
        ``codes``: the tasks' codes, where the caller has them."""
        ids = tuple(map(_task_id, tasks))
        key = self._groups.get(ids)
        if key is None:
            first: dict[int, tuple[int, int]] = {}
            shared = []  # (task, input position, first task, its position) for inputs read by two tasks
            for j, task in enumerate(tasks):
                for position, tensor in enumerate(self.boundary(task)[0]):
                    seen = first.setdefault(tensor, (j, position))
                    if seen[0] != j:
                        shared.append((j, position, *seen))
            codes = codes if codes is not None else tuple(self.codes(tasks))
            key = self._groups[ids] = self._id(("group", codes, tuple(shared)))
        return key

    def _wire_ids(self, tensors: np.ndarray, is_input: bool) -> np.ndarray:
        """Per tensor: its port encoding as a fused-op input (or output), interned."""
        from hexfuse.graph_passes.spec.builder import port_wire  # spec_builder imports this module

        known = self._wires[is_input]
        for tensor in ragged.distinct(tensors[known[tensors] < 0]).tolist():
            known[tensor] = self._id(("wire", port_wire(self.analysis, tensor, is_input)))
        return known[tensors]

    def _baked_ids(self, tensors: np.ndarray) -> np.ndarray:
        """``_baked`` of many tensors; without a Python step for those with nothing to bake."""
        known = self._baked_array
        missing = ragged.distinct(tensors[known[tensors] < 0])
        if len(missing):
            may_hold = self._small_integer_types[np.array(self.flat.type_of, dtype=np.int64)[missing]]
            may_hold |= self._quantized_marks[missing]
            known[missing[~may_hold]] = self._id(("baked", None, None))  # what _baked gives them
            for tensor in missing[may_hold].tolist():
                known[tensor] = self._baked(tensor)
        return known[tensors]

    def _baked(self, tensor: int) -> int:
        """What a kernel may bake of this tensor (quantization, small integer value), interned."""
        from hexfuse.graph_passes.spec.builder import quant_of  # spec_builder imports this module

        flat = self.flat
        quant = quant_of(self.analysis, tensor) if self.quantized[tensor] else None
        value = None
        if self._small_integer_types[flat.type_of[tensor]] and flat.is_constant(tensor):
            array = flat.constant_value(tensor)
            value = None if array is None else (str(array.dtype), array.shape, array.tobytes())
        return self._id(("baked", quant, value))


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

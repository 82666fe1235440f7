"""The graph the pass edits as flat integer arrays, built in one walk over the protobuf.

    nodes    op_types[i], domains[i], node_names[i], inputs[i] / outputs[i] (tensor ids; -1 = omitted optional input);
             a node with subgraphs (If/Loop/Scan) lists the outer tensors they read after its own
             inputs (subgraphs.py): ``explicit[i]`` is the number of inputs the NodeProto itself has
    tensors  names[t], ids[name], producer[t] (node or -1), consumers[t] (nodes, each once, in order),
             type_of[t] (index into types, -1 unknown), static[t], initializer[t]
    types    TensorType per distinct TypeProto: a 100k-node LM has ~10 distinct types, so shapes and
             dtypes are decoded once per type, not once per tensor

Every later stage (units, tasks, candidates, selection, rewrite) indexes these lists instead of
walking protobuf repeated fields: touching a field of a protobuf message from Python costs about as
much as a dozen list lookups, and the pass touches every node several times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np
import onnx
from onnx import helper

from hexfuse.graph_passes.graph import ragged
from hexfuse.graph_passes.graph.dataflow import overridable_initializers
from hexfuse.graph_passes.graph.subgraphs import has_subgraph, local_names, may_hold_subgraph, outer_reads

ONNX_DOMAINS = ("", "ai.onnx")
# Never folded: random ops give a new value on every run; ONNX Runtime keeps DequantizeLinear of a
# weight so QDQ-aware EPs (QNN) still see the quantized weight (qdq_boundary.py folds it into the port);
# control flow is not folded either.
_NOT_FOLDED = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                         "Bernoulli", "DequantizeLinear", "If", "Loop", "Scan"})

FOLD_STEPS = 32  # array steps of the constant-folding marks before the walk in topological order


@dataclass(frozen=True)
class TensorType:
    elem_type: int  # onnx.TensorProto data type; 0 where the type is not a tensor type
    dtype: str | None  # numpy name ("float32", "uint8", ...), None where not a tensor type
    shape: tuple[int, ...] | None  # None where any dimension is unknown or symbolic

    @property
    def elements(self) -> int:
        return math.prod(self.shape) if self.shape is not None else 0

    @property
    def nbytes(self) -> int:
        if self.shape is None or self.dtype is None:
            return 0
        try:
            return self.elements * np.dtype(self.dtype).itemsize
        except TypeError:
            return 0


def _decode(type_proto: onnx.TypeProto) -> TensorType:
    if not type_proto.HasField("tensor_type"):
        return TensorType(0, None, None)
    tensor = type_proto.tensor_type
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).name
    except (KeyError, TypeError, ValueError):
        dtype = None
    shape = None
    if tensor.HasField("shape"):
        dims = tensor.shape.dim
        if all(dim.HasField("dim_value") for dim in dims):
            shape = tuple(dim.dim_value for dim in dims)
    return TensorType(tensor.elem_type, dtype, shape)


@dataclass
class FlatGraph:
    model: onnx.ModelProto  # node i of the flat graph is model.graph.node[i]
    op_types: list[str]
    domains: list[str]
    node_names: list[str]
    inputs: list[tuple[int, ...]]
    outputs: list[tuple[int, ...]]
    names: list[str]
    ids: dict[str, int]
    producer: list[int]
    consumers: list[list[int]]
    type_of: list[int]
    types: list[TensorType]
    static: bytearray  # an initializer that no feed can override (dataflow.overridable_initializers)
    initializer: bytearray  # any initializer (IR<4 models also list weights as graph inputs)
    graph_inputs: frozenset[int]
    graph_outputs: frozenset[int]
    type_source: dict[int, onnx.ValueInfoProto] = field(repr=False)  # tensor -> inferred ValueInfoProto
    explicit: dict[int, int] = field(default_factory=dict)  # node with outer-scope reads -> its own input count
    _values: dict[int, np.ndarray | None] = field(default_factory=dict, repr=False)

    @staticmethod
    def build(model: onnx.ModelProto, typed: onnx.GraphProto | None = None,
              aliases: Mapping[str, str] | None = None) -> FlatGraph:
        """``typed``: a shape-inferred graph holding the types (default: ``model.graph`` itself);
        ``aliases``: tensors absent from ``typed`` that have the type of another (copies of a DQ)."""
        graph = model.graph
        typed = typed if typed is not None else graph
        ids: dict[str, int] = {}
        names: list[str] = []
        inputs: list[tuple[int, ...]] = []
        outputs: list[tuple[int, ...]] = []

        def intern(name: str) -> int:
            index = ids.get(name)
            if index is None:
                index = ids[name] = len(names)
                names.append(name)
            return index

        for info in graph.input:
            intern(info.name)
        for init in graph.initializer:
            intern(init.name)
        get = ids.get

        def port_ids(port_names) -> tuple[int, ...]:
            row = []
            for name in port_names:
                if not name:
                    row.append(-1)  # an omitted optional input
                    continue
                index = get(name)
                if index is None:
                    index = ids[name] = len(names)
                    names.append(name)
                row.append(index)
            return tuple(row)

        explicit: dict[int, int] = {}
        nodes = list(graph.node)  # one wrapper per node, kept: indexing the repeated field builds one per access
        op_types = [node.op_type for node in nodes]
        domains = [node.domain for node in nodes]
        node_names: list[str] = []
        minus_one = repeat(-1)
        # (reading a protobuf field costs: the attributes only of ops that may hold a subgraph, none in most models)
        holders = {op for op in set(zip(op_types, domains)) if may_hold_subgraph(*op)}
        for index, node in enumerate(nodes):
            node_names.append(node.name)
            # In a sorted, valid graph every input is known by now: one lookup per name, and the
            # slow path (which interns unknown names in order) only for what is not.
            ins = tuple(map(get, node.input, minus_one))
            if -1 in ins:
                ins = port_ids(node.input)
            if holders and (op_types[index], domains[index]) in holders and node.attribute and has_subgraph(node):
                reads = outer_reads(node)
                if reads:
                    explicit[index] = len(ins)
                    ins += port_ids(reads)
            inputs.append(ins)
            outs = node.output
            name = outs[0] if len(outs) == 1 else ""
            if name and name not in ids:  # the usual node: one new output
                ids[name] = len(names)
                outputs.append((len(names),))
                names.append(name)
            else:
                outputs.append(port_ids(outs))
        for info in graph.output:
            intern(info.name)
        count = len(names)
        producer = [-1] * count
        consumers: list[list[int]] = [[] for _ in range(count)]
        for index, outs in enumerate(outputs):
            for tensor in outs:
                if tensor >= 0:
                    producer[tensor] = index
        for index, ins in enumerate(inputs):
            for tensor in ins:
                if tensor >= 0:
                    users = consumers[tensor]
                    if not users or users[-1] != index:  # a node reading a tensor twice reads it once
                        users.append(index)
        graph_inputs = frozenset(ids[info.name] for info in graph.input)
        graph_outputs = frozenset(ids[info.name] for info in graph.output)
        initializer = bytearray(count)
        static = bytearray(count)
        overridable = overridable_initializers(model)
        for init in graph.initializer:
            tensor = ids[init.name]
            initializer[tensor] = 1
            static[tensor] = init.name not in overridable
        type_of, types, source = _types(typed, graph, ids, count)
        for alias, original in (aliases or {}).items():
            if alias in ids and original in ids:
                type_of[ids[alias]] = type_of[ids[original]]
                if ids[original] in source:
                    copy = onnx.ValueInfoProto()
                    copy.CopyFrom(source[ids[original]])
                    copy.name = alias
                    source[ids[alias]] = copy
        flat = FlatGraph(model, op_types, domains, node_names, inputs, outputs, names, ids, producer, consumers, type_of,
                         types, static, initializer, graph_inputs, graph_outputs, source, explicit)
        flat.__dict__["_nodes"] = nodes
        return flat

    # -- lookups ---------------------------------------------------------------------------------
    @property
    def node_count(self) -> int:
        return len(self.op_types)

    @property
    def nodes(self) -> list[onnx.NodeProto]:
        """The model's nodes as a list, one protobuf wrapper each (the model's node list is not edited
        while the flat graph describes it)."""
        nodes = self.__dict__.get("_nodes")
        if nodes is None:
            nodes = self.__dict__["_nodes"] = list(self.model.graph.node)
        return nodes

    @property
    def port_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(offsets, tensor ids, input counts): every node's ports, its inputs then its outputs, as one
        ragged array (ragged.py) for the stages that process many nodes at once."""
        arrays = self.__dict__.get("_ports")
        if arrays is None:
            rows = [ins + outs for ins, outs in zip(self.inputs, self.outputs)]
            ptr, values = ragged.from_rows(rows)
            counts = np.fromiter(map(len, self.inputs), dtype=np.int64, count=len(self.inputs))
            arrays = self.__dict__["_ports"] = (ptr, values, counts)
        return arrays

    @property
    def port_owners(self) -> tuple[np.ndarray, np.ndarray]:
        """Per port of ``port_arrays``: its node, and whether it is an input (else an output)."""
        owners = self.__dict__.get("_port_owners")
        if owners is None:
            ptr, ports, input_counts = self.port_arrays
            node_of = np.repeat(np.arange(self.node_count, dtype=np.int64), np.diff(ptr))
            is_input = np.arange(len(ports), dtype=np.int64) - ptr[node_of] < input_counts[node_of]
            owners = self.__dict__["_port_owners"] = (node_of, is_input)
        return owners

    @property
    def subgraph_names(self) -> frozenset[str]:
        """Every name the nodes' subgraphs define (subgraphs.local_names): new names must avoid them, and
        a node writing one of them must keep its place after the node whose subgraph defines it."""
        names = self.__dict__.get("_subgraph_names")
        if names is None:
            holders = np.flatnonzero(self.op_marks(may_hold_subgraph)).tolist()
            found: set[str] = set()
            for index in holders:
                found |= local_names(self.nodes[index])
            names = self.__dict__["_subgraph_names"] = frozenset(found)
        return names

    @property
    def op_table(self) -> tuple[list[tuple[str, str]], np.ndarray]:
        """(the distinct ops (type, domain) in order of first use, per node the index of its op there):
        per-op facts are then computed once per distinct op and spread with one index."""
        table = self.__dict__.get("_op_table")
        if table is None:
            ops: dict[tuple[str, str], int] = {}
            index = [ops.setdefault(op, len(ops)) for op in zip(self.op_types, self.domains)]
            table = self.__dict__["_op_table"] = (list(ops), np.array(index, dtype=np.int64))
        return table

    def op_marks(self, predicate: Callable[[str, str], bool]) -> np.ndarray:
        """Per node: ``predicate(op_type, domain)``, asked once per distinct op (``op_table``)."""
        ops, op_index = self.op_table
        return np.array([predicate(*op) for op in ops], dtype=bool)[op_index]

    @property
    def consumer_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(offsets, node ids) of every tensor's consumers, as one ragged array."""
        arrays = self.__dict__.get("_consumers")
        if arrays is None:
            arrays = self.__dict__["_consumers"] = ragged.from_rows(self.consumers)
        return arrays

    def node(self, index: int) -> onnx.NodeProto:
        return self.nodes[index]

    def type(self, tensor: int) -> TensorType | None:
        kind = self.type_of[tensor] if tensor >= 0 else -1
        return self.types[kind] if kind >= 0 else None

    def shape(self, tensor: int) -> tuple[int, ...] | None:
        kind = self.type(tensor)
        return kind.shape if kind is not None else None

    def is_constant(self, tensor: int) -> bool:
        """An initializer no feed overrides, or the ``value`` of a Constant node (no array decoded)."""
        if self.static[tensor]:
            return True
        source = self.producer[tensor]
        return source >= 0 and self.op_types[source] == "Constant" and any(
            attribute.name == "value" for attribute in self.node(source).attribute)

    @property
    def folds_to_constant(self) -> bytearray:
        """Per tensor: a constant once the runtime folds constants (ONNX Runtime does at every level
        but "disable all"): a static initializer, or the output of a deterministic standard node whose
        inputs all fold (light models build their weights with ConstantOfShape, for one)."""
        marks = self.__dict__.get("_folds")
        if marks is None:
            marks = self.__dict__["_folds"] = self._fold_marks()
        return marks

    def _fold_marks(self) -> bytearray:
        folding = self.op_marks(lambda op, domain: domain in ONNX_DOMAINS and op not in _NOT_FOLDED)
        return constant_closure(self, bytearray(self.static), folding)[1]

    def constant_value(self, tensor: int) -> np.ndarray | None:
        if tensor in self._values:
            return self._values[tensor]
        value = None
        if self.static[tensor]:
            value = onnx.numpy_helper.to_array(self._initializer(self.names[tensor]))
        elif self.producer[tensor] >= 0 and self.op_types[self.producer[tensor]] == "Constant":
            for attribute in self.node(self.producer[tensor]).attribute:
                if attribute.name == "value":
                    value = onnx.numpy_helper.to_array(attribute.t)
        self._values[tensor] = value
        return value

    def _initializer(self, name: str) -> onnx.TensorProto:
        table = self.__dict__.get("_initializers")
        if table is None:
            table = self.__dict__["_initializers"] = {init.name: init for init in self.model.graph.initializer}
        return table[name]


def constant_closure(graph: FlatGraph, seeds: bytearray, eligible: np.ndarray) -> tuple[bytearray, bytearray]:
    """(nodes, tensors) computed from the ``seeds`` tensors alone: an ``eligible`` node whose inputs all
    are (omitted ones count), and its outputs. As array steps: each step marks the nodes whose inputs
    are all marked, until nothing changes (the longest chain of such nodes, plus one step); past
    FOLD_STEPS steps one walk in topological order finishes the job."""
    ports = graph.port_arrays[1]
    node_of, is_input = graph.port_owners
    ins, in_node = ports[is_input], node_of[is_input]
    written = ~is_input & (ports >= 0)
    outs, out_node = ports[written], node_of[written]
    marks = np.append(np.frombuffer(bytes(seeds), dtype=np.uint8).astype(bool), True)  # [-1]: an omitted input
    for _ in range(FOLD_STEPS):
        waiting = np.zeros(graph.node_count, dtype=bool)
        waiting[in_node[~marks[ins]]] = True
        nodes = eligible & ~waiting
        grown = marks.copy()
        grown[outs[nodes[out_node]]] = True
        if np.array_equal(grown, marks):
            return bytearray(nodes.astype(np.uint8).tobytes()), bytearray(marks[:-1].astype(np.uint8).tobytes())
        marks = grown
    node_marks = bytearray(graph.node_count)
    tensor_marks = bytearray(seeds)
    for index, ins_of in enumerate(graph.inputs):  # nodes are in topological order
        if eligible[index] and all(t < 0 or tensor_marks[t] for t in ins_of):
            node_marks[index] = 1
            for tensor in graph.outputs[index]:
                if tensor >= 0:
                    tensor_marks[tensor] = 1
    return node_marks, tensor_marks


def _types(typed: onnx.GraphProto, graph: onnx.GraphProto, ids: dict[str, int],
           count: int) -> tuple[list[int], list[TensorType], dict[int, onnx.ValueInfoProto]]:
    """Type id per tensor. Later sources win as in the inferred model: inputs, value_info, outputs;
    initializers fill what is left. Types are interned by their serialized TypeProto."""
    type_of = [-1] * count
    table: dict[bytes, int] = {}
    types: list[TensorType] = []
    source: dict[int, onnx.ValueInfoProto] = {}
    get = ids.get
    for infos in (typed.input, typed.value_info, typed.output):
        for info in infos:
            tensor = get(info.name)
            if tensor is None:
                continue
            key = info.type.SerializeToString()
            kind = table.get(key)
            if kind is None:
                kind = table[key] = len(types)
                types.append(_decode(info.type))
            type_of[tensor] = kind
            source[tensor] = info
    for init in graph.initializer:
        tensor = ids[init.name]
        if type_of[tensor] < 0:
            key = b"init" + bytes(str((init.data_type, tuple(init.dims))), "ascii")
            kind = table.get(key)
            if kind is None:
                kind = table[key] = len(types)
                types.append(_decode(helper.make_tensor_type_proto(init.data_type, list(init.dims))))
            type_of[tensor] = kind
    return type_of, types, source

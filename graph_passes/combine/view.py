"""The model as N requests that share nothing but weights.

Requests are read from ``hexfuse merge``'s metadata (node-name prefixes), else found as the weakly
connected components over non-constant tensors (a prefill and a decode exported as one graph). Nodes
computed from constants alone (a weight's DequantizeLinear, a folded shape) belong to no request.

``constant[t]`` is a digest of tensor t's value where t is computed from constants alone: two tensors
with the same digest hold the same bytes (equal initializer bytes, or the same op and attributes on
equal constants), whatever their names; the matcher compares weights by it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import onnx
from onnx import numpy_helper

from hexfuse.graph_passes.analysis.sources import request_prefixes
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.dataflow import overridable_initializers

SHARED = -1  # request index of a node computed from constants alone
# ops whose output is not a function of their inputs: never treated as constants, never combined
_RANDOM = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
                     "Bernoulli", "Dropout"})


@dataclass
class RequestView:
    model: onnx.ModelProto  # sorted, with value_info for every tensor and every weight's data
    nodes: list[onnx.NodeProto]
    names: list[str]  # request names, in request order
    request_of: list[int]  # per node: its request's index, SHARED for constant computations
    producer: dict[str, int]  # tensor -> node
    readers: dict[str, list[tuple[int, int]]]  # tensor -> (node, input slot), in node order
    types: dict[str, tuple[int, tuple[int, ...] | None]]  # tensor -> (elem type, static shape or None)
    constant: dict[str, bytes]  # tensor -> digest of its value, for tensors computed from constants alone
    weight_bytes: dict[str, int]  # initializer -> its size in bytes
    graph_inputs: list[str]
    graph_outputs: list[str]
    prefixes: list[str] = field(default_factory=list)  # node-name prefix per request (merge's metadata), else empty

    def local_name(self, index: int) -> str:
        """A node's name without its request's prefix."""
        name = self.nodes[index].name
        request = self.request_of[index]
        if self.prefixes and request >= 0 and name.startswith(self.prefixes[request]):
            return name[len(self.prefixes[request]):]
        return name

    @property
    def count(self) -> int:
        return len(self.names)

    def shape(self, tensor: str) -> tuple[int, ...] | None:
        return self.types.get(tensor, (0, None))[1]

    def elem_type(self, tensor: str) -> int:
        return self.types.get(tensor, (0, None))[0]

    @cached_property
    def initializers(self) -> dict[str, onnx.TensorProto]:
        return {init.name: init for init in self.model.graph.initializer}

    def small_value(self, tensor: str, limit: int = 8) -> list | None:
        """An initializer's values where it has at most ``limit`` elements (for messages), else None."""
        init = self.initializers.get(tensor)
        if init is None or int(np.prod(init.dims)) > limit:
            return None
        return numpy_helper.to_array(init).reshape(-1).tolist()

    def requests_of_tensor(self, tensor: str) -> int:
        node = self.producer.get(tensor)
        if node is not None:
            return self.request_of[node]
        for reader, _ in self.readers.get(tensor, ()):
            return self.request_of[reader]
        return SHARED


def attribute_key(node: onnx.NodeProto) -> bytes:
    """The node's attributes as bytes, independent of their order in the file."""
    return b"".join(a.SerializeToString(deterministic=True) for a in sorted(node.attribute, key=lambda a: a.name))


def _digest(*parts: bytes) -> bytes:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.digest()


# 4-bit types: numpy holds one element per byte, the model (and DDR) two
_NIBBLE_TYPES = frozenset(getattr(onnx.TensorProto, name) for name in ("INT4", "UINT4", "FLOAT4E2M1")
                          if hasattr(onnx.TensorProto, name))


def _initializer_digest(init: onnx.TensorProto) -> tuple[bytes, int]:
    """(digest of the value, bytes it takes stored: packed for 4-bit types, as the weight is read)."""
    values = np.ascontiguousarray(numpy_helper.to_array(init))
    head = f"{init.data_type}:{list(init.dims)}".encode()
    stored = (values.size + 1) // 2 if init.data_type in _NIBBLE_TYPES else values.nbytes
    return _digest(b"init", head, values.tobytes()), int(stored)


def _types(model: onnx.ModelProto) -> dict[str, tuple[int, tuple[int, ...] | None]]:
    types: dict[str, tuple[int, tuple[int, ...] | None]] = {}
    graph = model.graph
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor_type = info.type.tensor_type
        dims = tensor_type.shape.dim if tensor_type.HasField("shape") else None
        shape = None if dims is None or any(not d.HasField("dim_value") for d in dims) else \
            tuple(d.dim_value for d in dims)
        types[info.name] = (tensor_type.elem_type, shape)
    for init in graph.initializer:
        types[init.name] = (init.data_type, tuple(init.dims))
    return types


def _component_name(names: list[str], index: int) -> str:
    """The common prefix of a component's input and output names (``decode_`` -> ``decode``), else r<i>."""
    prefix = os.path.commonprefix(names).rstrip("_/.:-") if len(names) > 1 else ""
    return prefix if prefix and prefix[0].isalpha() else f"r{index}"


def _components(model: onnx.ModelProto, nodes: list[onnx.NodeProto], constant: dict[str, bytes],
                live_inputs: list[str]) -> tuple[list[str], list[int]]:
    parent = list(range(len(nodes)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    producer = {t: i for i, node in enumerate(nodes) for t in node.output if t}
    first_reader: dict[str, int] = {}
    shared = [all(t in constant for t in node.output if t) and bool(node.output) for node in nodes]
    for index, node in enumerate(nodes):
        if shared[index]:
            continue
        for tensor in node.input:
            if not tensor or tensor in constant:
                continue
            other = producer.get(tensor)
            other = first_reader.setdefault(tensor, index) if other is None else other
            parent[find(index)] = find(other)
    roots: dict[int, int] = {}
    for tensor in live_inputs:
        if tensor in first_reader:
            roots.setdefault(find(first_reader[tensor]), len(roots))
    for index in range(len(nodes)):
        if not shared[index]:
            roots.setdefault(find(index), len(roots))  # a part fed by no graph input
    request_of = [SHARED if shared[i] else roots[find(i)] for i in range(len(nodes))]
    edges: list[list[str]] = [[] for _ in roots]
    for tensor in live_inputs:
        if tensor in first_reader:
            edges[roots[find(first_reader[tensor])]].append(tensor)
    for info in model.graph.output:
        node = producer.get(info.name)
        if node is not None and request_of[node] != SHARED:
            edges[request_of[node]].append(info.name)
    return [_component_name(sorted(e), i) for i, e in enumerate(edges)], request_of


def request_view(model: onnx.ModelProto) -> RequestView:
    """``model``: sorted and shape-inferred (LoadedModel.inferred)."""
    graph = model.graph
    nodes = list(graph.node)
    overridable = overridable_initializers(model)
    constant: dict[str, bytes] = {}
    weight_bytes: dict[str, int] = {}
    for init in graph.initializer:
        if init.name not in overridable:
            constant[init.name], weight_bytes[init.name] = _initializer_digest(init)
    producer: dict[str, int] = {}
    readers: dict[str, list[tuple[int, int]]] = {}
    for index, node in enumerate(nodes):
        for slot, tensor in enumerate(node.input):
            if tensor:
                readers.setdefault(tensor, []).append((index, slot))
        for tensor in node.output:
            if tensor:
                producer[tensor] = index
        if node.op_type in _RANDOM or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                          for a in node.attribute):
            continue
        if all(not t or t in constant for t in node.input):
            inputs = b"".join(constant.get(t, b"-") for t in node.input)
            key = _digest(b"node", node.domain.encode(), node.op_type.encode(), attribute_key(node), inputs)
            for k, tensor in enumerate(node.output):
                if tensor:
                    constant[tensor] = _digest(key, str(k).encode())
    live_inputs = [info.name for info in graph.input if info.name not in constant]
    prefixes = request_prefixes(model)
    if prefixes:
        names = [name for name, _ in prefixes]
        request_of = []
        for node in nodes:
            if node.output and all(t in constant for t in node.output if t):
                request_of.append(SHARED)
                continue
            owner = next((i for i, (_, prefix) in enumerate(prefixes) if node.name.startswith(prefix)), None)
            if owner is None:
                raise HexfuseError(f"node {node.name!r} belongs to none of the requests the model's metadata names "
                                   f"({', '.join(names)}); merge the requests again with `hexfuse merge`")
            request_of.append(owner)
    else:
        names, request_of = _components(model, nodes, constant, live_inputs)
    return RequestView(model, nodes, names, request_of, producer, readers, _types(model), constant, weight_bytes,
                       live_inputs, [info.name for info in graph.output], [prefix for _, prefix in prefixes])

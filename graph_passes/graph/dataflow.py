"""Integer-indexed dataflow view of a sorted ONNX graph: producers, consumers, types, shapes.

The pass never walks protobuf repeated fields in hot loops; it asks this view, built once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import onnx
from onnx import helper

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.graph.subgraphs import node_reads


OVERRIDABLE_INITIALIZERS_IR = 4  # from this IR on, an initializer listed as a graph input is overridable


def overridable_initializers(model: onnx.ModelProto) -> frozenset[str]:
    """Initializers a feed may replace: those listed as graph inputs, from IR 4 on.

    IR 3 lists every initializer as an input and still means a constant (ONNX Runtime agrees).
    """
    if model.ir_version < OVERRIDABLE_INITIALIZERS_IR:
        return frozenset()
    listed = {info.name for info in model.graph.input}
    return frozenset(init.name for init in model.graph.initializer if init.name in listed)


@dataclass
class Dataflow:
    graph: onnx.GraphProto  # nodes in topological order
    types: dict[str, onnx.TypeProto]  # every tensor with a known type (inputs, value_info, outputs, initializers)
    overridable: frozenset[str]  # initializers a feed may replace (overridable_initializers)

    @staticmethod
    def of(inferred: onnx.ModelProto) -> Dataflow:
        graph = inferred.graph
        types: dict[str, onnx.TypeProto] = {}
        for info in (*graph.input, *graph.value_info, *graph.output):
            types[info.name] = info.type
        for init in graph.initializer:
            types.setdefault(init.name, helper.make_tensor_type_proto(init.data_type, list(init.dims)))
        return Dataflow(graph, types, overridable_initializers(inferred))

    @property
    def nodes(self):
        return self.graph.node

    @cached_property
    def producer(self) -> dict[str, int]:
        return {name: index for index, node in enumerate(self.graph.node) for name in node.output if name}

    @cached_property
    def consumers(self) -> dict[str, list[int]]:
        result: dict[str, list[int]] = {}
        for index, node in enumerate(self.graph.node):
            for name in dict.fromkeys(node_reads(node)):  # once per node; subgraphs' outer reads count
                if name:
                    result.setdefault(name, []).append(index)
        return result

    @cached_property
    def initializers(self) -> dict[str, onnx.TensorProto]:
        return {init.name: init for init in self.graph.initializer}

    @cached_property
    def graph_inputs(self) -> frozenset[str]:
        return frozenset(info.name for info in self.graph.input)

    @cached_property
    def graph_outputs(self) -> frozenset[str]:
        return frozenset(info.name for info in self.graph.output)

    def is_static(self, name: str) -> bool:
        """An initializer that no feed can override."""
        return name in self.initializers and name not in self.overridable

    @cached_property
    def _dtype_cache(self) -> dict[str, str]:
        return {}

    @cached_property
    def _shape_cache(self) -> dict[str, tuple[int, ...] | None]:
        return {}

    def dtype(self, name: str) -> str:
        cached = self._dtype_cache.get(name)
        if cached is None:
            cached = self._dtype_cache[name] = self._dtype(name)
        return cached

    def shape(self, name: str) -> tuple[int, ...] | None:
        """The static shape, or None where any dimension is unknown or symbolic."""
        if name not in self._shape_cache:
            self._shape_cache[name] = self._shape(name)
        return self._shape_cache[name]

    def _dtype(self, name: str) -> str:
        tensor_type = self.types.get(name)
        if tensor_type is None or not tensor_type.HasField("tensor_type"):
            raise HexfuseError(f"tensor {name!r} has no known tensor type")
        return np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.tensor_type.elem_type)).name

    def _shape(self, name: str) -> tuple[int, ...] | None:
        tensor_type = self.types.get(name)
        if tensor_type is None or not tensor_type.HasField("tensor_type"):
            return None
        if not tensor_type.tensor_type.HasField("shape"):
            return None
        dims = tensor_type.tensor_type.shape.dim
        if any(not dim.HasField("dim_value") for dim in dims):
            return None
        return tuple(dim.dim_value for dim in dims)

    def constant_value(self, name: str) -> np.ndarray | None:
        """The value of an initializer or a Constant node's output, else None."""
        if self.is_static(name):
            return onnx.numpy_helper.to_array(self.initializers[name])
        index = self.producer.get(name)
        if index is not None and self.graph.node[index].op_type == "Constant":
            for attribute in self.graph.node[index].attribute:
                if attribute.name == "value":
                    return onnx.numpy_helper.to_array(attribute.t)
        return None

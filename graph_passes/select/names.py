"""Fresh, deterministic names that never collide with a name the model already uses."""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from hexfuse.graph_passes.graph.subgraphs import local_names, may_hold_subgraph


class NameScope:
    def __init__(self, model: onnx.ModelProto, tensor_names: Iterable[str] | None = None,
                 op_types: Iterable[str] | None = None, node_names: Iterable[str] | None = None,
                 subgraph_names: Iterable[str] | None = None) -> None:
        """``tensor_names`` / ``op_types`` / ``node_names`` / ``subgraph_names`` (the names If, Loop and
        Scan bodies define, FlatGraph.subgraph_names): the model's, where the caller has them listed
        already (a flat graph), so the protobuf is not walked for them again."""
        graph = model.graph
        taken = set(node_names if node_names is not None else (node.name for node in graph.node))
        if tensor_names is None:
            taken.update(name for node in graph.node for name in (*node.input, *node.output))
            taken.update(info.name for info in (*graph.input, *graph.output))
            taken.update(init.name for init in graph.initializer)
        else:
            taken.update(tensor_names)
        if subgraph_names is None:  # a new name in the main graph must not be defined in a body too
            subgraph_names = (name for node in graph.node if may_hold_subgraph(node.op_type, node.domain)
                              for name in local_names(node))
        taken.update(subgraph_names)
        taken.update(info.name for info in graph.value_info)
        taken.update(function.name for function in model.functions)
        # fused op types must not shadow any op of the model
        taken.update(op_types if op_types is not None else {node.op_type for node in graph.node})
        self._taken = taken
        self._next: dict[str, int] = {}  # base -> next suffix to try: k names on one base cost O(k), not O(k^2)

    def fresh(self, base: str) -> str:
        """``base``, else ``base_1``, ``base_2``, ...: the first that is free."""
        suffix = self._next.get(base, 0)
        while True:
            name = f"{base}_{suffix}" if suffix else base
            suffix += 1
            if name not in self._taken:
                break
        self._next[base] = suffix
        self._taken.add(name)
        return name

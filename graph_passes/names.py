"""Fresh, deterministic names that never collide with a name the model already uses."""

from __future__ import annotations

import onnx


class NameScope:
    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        taken = {node.name for node in graph.node}
        taken.update(name for node in graph.node for name in (*node.input, *node.output))
        taken.update(info.name for info in (*graph.input, *graph.output, *graph.value_info))
        taken.update(init.name for init in graph.initializer)
        taken.update(function.name for function in model.functions)
        taken.update(node.op_type for node in graph.node)  # fused op types must not shadow any op
        self._taken = taken

    def fresh(self, base: str) -> str:
        name, suffix = base, 1
        while name in self._taken:
            name = f"{base}_{suffix}"
            suffix += 1
        self._taken.add(name)
        return name

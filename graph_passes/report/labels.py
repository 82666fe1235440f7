"""How reports name a node: so that the user finds it in their own file.

    named node                 MatMul 'l0_q'          (the name in the file)
    unnamed node               #12 Conv               (index in the file's own node list, its op type there)
    added by the opset upgrade Constant (added by the opset upgrade to 13, beside #40 Clip)
    DQ copied by the pass      #7 DequantizeLinear (copy)

The pass edits a model that may differ from the file: upgraded to opset 13 (the converter adds
nodes), sorted, and with shared DequantizeLinear nodes copied (graph/qdq.py). ``origin`` (load/model.py) and
``sources`` (graph/qdq.py) map each edited node back to the file.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx


class NodeLabels:
    def __init__(self, file: onnx.GraphProto, edited: onnx.GraphProto, origin: Sequence[int] | None,
                 sources: Sequence[int] | None = None, copies: frozenset[int] = frozenset(),
                 upgraded_to: int | None = None, listed: tuple[Sequence[str], Sequence[str]] | None = None) -> None:
        """``origin``: node of the loaded model -> file index (-1 added), None for the identity;
        ``sources``: node of the edited model -> node of the loaded model, None for the identity;
        ``copies``: edited nodes that are copies made by the pass; ``listed``: the file's node names and
        op types where the caller has them listed already (a flat graph of the file's own nodes)."""
        self.file = file
        self.listed = listed
        self.edited = edited
        self.origin = origin
        self.sources = sources
        self.copies = copies
        self.upgraded_to = upgraded_to

    @property
    def file_nodes(self) -> int:
        return len(self.file.node)

    def file_index(self, node: int) -> int:
        """Index of the edited model's node ``node`` in the file's node list; -1 if the upgrade added it."""
        loaded = self.sources[node] if self.sources is not None else node
        return self.origin[loaded] if self.origin is not None else loaded

    def __call__(self, node: int) -> str:
        index = self.file_index(node)
        if index < 0:
            label = f"{self.edited.node[node].op_type} (added by the opset upgrade to {self.upgraded_to}"
            neighbour = next((self.file_index(k) for k in range(node + 1, len(self.edited.node))
                              if self.file_index(k) >= 0), -1)
            return label + (f", before {self.of_file(neighbour)})" if neighbour >= 0 else ")")
        label = self.of_file(index)
        return f"{label} (copy)" if node in self.copies else label

    def of_file(self, index: int) -> str:
        if self.listed is not None:
            name, op_type = self.listed[0][index], self.listed[1][index]
        else:  # (reports name a few thousand nodes at most: a lookup each is cheaper than a walk over a large model)
            node = self.file.node[index]
            name, op_type = node.name, node.op_type
        return f"{op_type} {name!r}" if name else f"#{index} {op_type}"

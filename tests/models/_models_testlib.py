"""Helpers for tests/models (onnx + onnxruntime + numpy only; no torch)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"
CATALOG_PATH = MODELS_DIR / "catalog.json"

sys.path.insert(0, str(MODELS_DIR))  # models/ is a script directory, not a package
from model_inputs import make_input  # noqa: E402  (the builder's own input specs)



def load_catalog() -> dict:
    with open(CATALOG_PATH) as f:
        return json.load(f)


def make_feeds(entry: dict, seed: int) -> dict[str, np.ndarray]:
    """Random but valid inputs for a catalog entry, following its input_values specs."""
    rng = np.random.default_rng(seed)
    return {
        name: make_input(entry["input_values"][name], shape, entry["dtype"][name], rng)
        for name, shape in entry["inputs"].items()
    }


class Reach:
    """Reachability between the nodes of a (topologically sorted) ONNX graph, as ancestor bitsets."""

    def __init__(self, graph: onnx.GraphProto):
        self.nodes = list(graph.node)
        producer: dict[str, int] = {}
        self.anc: list[int] = []
        # graph inputs are pseudo-sources: remember which inputs each node depends on
        self.input_deps: list[set[str]] = []
        graph_inputs = {i.name for i in graph.input}
        for idx, n in enumerate(self.nodes):
            a = 0
            deps: set[str] = set()
            for t in n.input:
                if t in producer:
                    p = producer[t]
                    a |= self.anc[p] | (1 << p)
                    deps |= self.input_deps[p]
                elif t in graph_inputs:
                    deps.add(t)
            self.anc.append(a)
            self.input_deps.append(deps)
            for o in n.output:
                if o:
                    producer[o] = idx
        self.producer = producer

    def reaches(self, a: int, b: int) -> bool:
        """True if there is a path a -> ... -> b."""
        return bool((self.anc[b] >> a) & 1)

    def independent(self, a: int, b: int) -> bool:
        return a != b and not self.reaches(a, b) and not self.reaches(b, a)

    def idx(self, op_types: set[str]) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.op_type in op_types]


HEAVY = {"MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"}


def independent_heavy_pairs(graph: onnx.GraphProto, limit: int = 10**9) -> int:
    """Number of pairs of compute-heavy nodes (MatMul/Gemm/Conv...) that are mutually unreachable."""
    r = Reach(graph)
    heavy = r.idx(HEAVY)
    count = 0
    for i, a in enumerate(heavy):
        for b in heavy[i + 1 :]:
            if r.independent(a, b):
                count += 1
                if count >= limit:
                    return count
    return count


def static_shape(vi: onnx.ValueInfoProto) -> list[int] | None:
    t = vi.type.tensor_type
    if not vi.type.HasField("tensor_type") or not t.HasField("shape"):
        return None
    dims = []
    for d in t.shape.dim:
        if not d.HasField("dim_value") or d.dim_value <= 0:
            return None
        dims.append(d.dim_value)
    return dims

"""QNN profile rows -> model nodes -> engines: the one mapping ``hexfuse ab`` and ``hexfuse calibrate`` share.

A detailed QNN EP profile (onnxruntime-qnn, ``profiling_level=detailed``) has one row per executed QNN op:

    conv0:OpId_22 (cycles)                  the ONNX node `conv0`
    mm0/MatMulAddFusion_2:OpId_9 (cycles)   ORT fused MatMul `mm0` with the Add after it before QNN saw it
    node_conv2d_3_token_51:OpId_40 (cycles) QNN renamed it: a QDQ unit DQ -> Conv -> Q became one op
    Input OpId_2 (cycles)                   QNN's own rows: graph input/output copies, layout
    Transpose_token_108:OpId_7 (cycles)     transposes it inserted; they match no model node
    _inlfunc_HexFuse_0_a34abc_conv3:OpId_9  ORT inlined function HexFuse_0_a34abc; body node `conv3`

``row_name`` takes the node name out of the identifier, ``match_node`` finds the model node (also under
a ``_token_<n>`` suffix), and ``row_engine`` classes a row as matrix / vector / dma (graph_passes.engines.classify
for ONNX op types, a small table for QNN's own op names), ``fused`` for a hexfuse node, else ``other``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar

from hexfuse.graph_passes.engines.classify import Engine, engine_of

MATRIX, VECTOR, DMA, FUSED, OTHER = "matrix", "vector", "dma", "fused", "other"
ENGINES = (MATRIX, VECTOR, DMA)
FUSED_DOMAIN = "hexfuse"

_ROW = re.compile(r"^(?P<name>.*?)(?::|\s)OpId_\d+ \(cycles\)$")
_TOKEN = re.compile(r"_token_\d+$")
_INLINED = "_inlfunc_"  # ORT's prefix for nodes of an inlined function: _inlfunc_<function>_<node>
# Profile rows are QNN's HTP ops. No op is called DMA by its name: QNN runs data movement (Transpose,
# Concat, Slice, Gather, a copying view) as HVX kernels, and only its graph-IO copies and weight moves
# on the DMA engine (the engine maps in models/engines/, docs/engines.md).
_PROFILE_ENGINES = {Engine.MATRIX: MATRIX, Engine.VECTOR: VECTOR, Engine.DMA: VECTOR, Engine.FREE: VECTOR}
# QNN's own op names (and the graph-IO rows), lowercased without separators.
_QNN_OPS = {
    MATRIX: {"conv2d", "conv3d", "depthwiseconv2d", "transposeconv2d", "fullyconnected", "matmul", "batchmatmul"},
    VECTOR: {"poolmax2d", "poolavg2d", "elementwiseneuron", "quantize", "dequantize", "convert", "relu6", "rmsnorm",
             "gelu", "layernorm", "stridedslice", "channelshuffle", "transpose", "reshape", "concat", "gather", "pad"},
    DMA: {"input", "output"},
}

T = TypeVar("T")


def row_name(identifier: str) -> str | None:
    """'conv0_token_1:OpId_22 (cycles)' -> 'conv0_token_1'; None for rows that are not per-op."""
    match = _ROW.match(identifier.strip())
    return match.group("name").strip() if match else None


def _candidates(name: str):
    bare = _TOKEN.sub("", name)
    yield name
    yield bare
    while "/" in bare:  # ORT's fusions name their node '<first node>/<Fusion>_<n>' (MatMulAddFusion)
        bare = bare.rsplit("/", 1)[0]
        yield bare
    if bare.startswith(_INLINED):  # the function name has underscores too: try every split
        rest = bare[len(_INLINED):]
        yield from (rest[i + 1:] for i, ch in enumerate(rest) if ch == "_")


def node_key(name: str, nodes: Mapping[str, object]) -> str | None:
    """The key of ``nodes`` a profile row names, also under QNN's ``_token_<n>`` and ORT's inlining prefix."""
    return next((c for c in _candidates(name) if c in nodes), None)


def match_node(name: str, nodes: Mapping[str, T]) -> T | None:
    key = node_key(name, nodes)
    return None if key is None else nodes[key]


def op_type_guess(name: str) -> str:
    """An op type from a name no model node has: 'Transpose_token_108' -> 'Transpose', 'Softmax4' -> 'Softmax'."""
    base = _TOKEN.sub("", name.split("/")[-1])
    return re.sub(r"[_\d]+$", "", base) or name


def engine_of_op(op_type: str, domain: str = "") -> str:
    """Engine class of an ONNX op type (with its domain) or of a QNN op name."""
    if domain == FUSED_DOMAIN or op_type.startswith("HexFuse"):
        return FUSED
    engine = engine_of(op_type, domain)
    if engine in _PROFILE_ENGINES:
        return _PROFILE_ENGINES[engine]
    key = re.sub(r"[^a-z0-9]", "", op_type.lower())
    for cls, names in _QNN_OPS.items():
        if key in names:
            return cls
    if key.startswith("elementwise") or key.startswith("reduce"):
        return VECTOR
    return OTHER


def row_engine(name: str, op_types: Mapping[str, tuple[str, str]]) -> tuple[str | None, str]:
    """(matched model node name or None, engine) of a profile row; ``op_types``: node -> (op_type, domain)."""
    node = node_key(name, op_types)
    if node is not None:
        return node, engine_of_op(*op_types[node])
    return None, engine_of_op(op_type_guess(name))

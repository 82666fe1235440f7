"""Which Hexagon engine an ONNX op mostly occupies.

    MATRIX  HMX tiles in VTCM: MatMul, Gemm, Conv, ConvTranspose and their integer/QDQ forms
    VECTOR  HVX: elementwise math, activations, norms, Softmax, reductions, pooling, Q/DQ, Cast, Where
    DMA     data movement DDR<->VTCM: Transpose, Concat, Slice, Split, Gather, Pad, Tile, Expand
    FREE    no work on any engine: views (Reshape, Squeeze, ...) and shape arithmetic
    OPAQUE  anything else: control flow, custom domains, unknown ops; never fused, a barrier

The classification is by op type; the cost model looks at shapes. Two facts refine it (``decide``):

- **Where the fused op runs.** On QNN's HTP backend a fused op's matrix task becomes QNN's own ops and
  every other task one package op launched on an HVX thread (op_package/htp_expand.py). A Transpose or
  Concat there is HVX code, not a DMA transfer: on HTP the DMA class folds into VECTOR ("move on
  HVX"); the host executor keeps its DMA lane.
- **What QNN schedules today** (an engine map, engine_map.py, read from the optrace schematic): where
  each node's kernels run (a QDQ Conv on HMX, an fp32 MatMul on HVX, a Relu folded into its Conv). It
  sets the *resource* a node occupies and is reported as the deciding source; it never moves an op
  into or out of MATRIX, because matrix work must reach QNN's own ops and nothing else can.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hexfuse.graph_passes.engines.engine_map import NodeEngines


class Engine(enum.Enum):
    MATRIX = "matrix"
    VECTOR = "vector"
    DMA = "dma"
    FREE = "free"
    OPAQUE = "opaque"


FUSABLE_ENGINES = (Engine.MATRIX, Engine.VECTOR, Engine.DMA)

_MATRIX_OPS = {
    "MatMul", "Gemm", "Conv", "ConvTranspose", "MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv",
}
_VECTOR_OPS = {
    # elementwise unary
    "Abs", "Neg", "Reciprocal", "Sqrt", "Exp", "Log", "Ceil", "Floor", "Round", "Sign", "Erf", "Not",
    "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Tanh", "Asinh", "Acosh", "Atanh",
    "IsNaN", "IsInf", "BitwiseNot",
    # activations
    "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Sigmoid", "HardSigmoid", "HardSwish", "Softplus",
    "Softsign", "Gelu", "Mish", "ThresholdedRelu", "Clip", "Shrink",
    # elementwise binary / variadic
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
    "Where",
    # normalization, softmax
    "Softmax", "LogSoftmax", "Hardmax", "LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
    "BatchNormalization", "InstanceNormalization", "GroupNormalization", "LpNormalization", "LRN",
    "MeanVarianceNormalization",
    # reductions
    "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "CumSum", "TopK",
    # pooling
    "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool",
    # type conversion and quantization outside QDQ units
    "Cast", "CastLike", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    # resampling computes per element
    "Resize", "Upsample",
}
_DMA_OPS = {
    "Transpose", "Concat", "Slice", "Split", "Gather", "GatherElements", "GatherND", "Pad", "Tile", "Expand",
    "ScatterND", "ScatterElements", "DepthToSpace", "SpaceToDepth", "ReverseSequence", "Trilu",
}
_FREE_OPS = {
    "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout", "Shape", "Size", "Constant",
    "ConstantOfShape", "Range", "EyeLike",
}
# Ops whose output shares storage with their first input: RAW/WAR/WAW checks must see through them.
VIEW_OPS = frozenset({"Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout"})

_ONNX_DOMAINS = ("", "ai.onnx")


def engine_of(op_type: str, domain: str = "") -> Engine:
    if domain not in _ONNX_DOMAINS:
        return Engine.OPAQUE
    if op_type in _MATRIX_OPS:
        return Engine.MATRIX
    if op_type in _VECTOR_OPS:
        return Engine.VECTOR
    if op_type in _DMA_OPS:
        return Engine.DMA
    if op_type in _FREE_OPS:
        return Engine.FREE
    return Engine.OPAQUE


RULES, OPTRACE = "op-type rules", "optrace map"
_RULE_RESOURCE = {Engine.MATRIX: "hmx", Engine.VECTOR: "hvx", Engine.DMA: "dma", Engine.FREE: "none",
                  Engine.OPAQUE: "none"}


@dataclass(frozen=True)
class Decision:
    """A node's engine class for the pass and what it occupies, with the source that decided."""

    engine: Engine
    resource: str  # hmx | hvx | dma | main | none: where the node's work runs (QNN today, or by the rules)
    source: str  # RULES | OPTRACE
    note: str = ""  # what a report adds: 'move on HVX', 'folded into conv0 by QNN', the kernels
    moves: bool = False  # the node only moves data (by the map's kernels, else by its op type)


def htp_engine(engine: Engine) -> Engine:
    """The class a unit takes where non-matrix tasks run as HVX task ops (QNN HTP)."""
    return Engine.VECTOR if engine is Engine.DMA else engine


def decide(op_type: str, domain: str, node: NodeEngines | None, htp: bool) -> Decision:
    """``node``: the engine map's entry (None: no map, or the node is not in it); ``htp``: non-matrix
    tasks run as HVX task ops (else the host executor's lanes, where the map does not apply)."""
    rule = engine_of(op_type, domain)
    moves = rule is Engine.DMA
    if not htp or rule in (Engine.FREE, Engine.OPAQUE):  # views stay views even where QNN copies them
        return Decision(rule, _RULE_RESOURCE[rule], RULES, moves=moves)
    engine = htp_engine(rule)
    if node is None:
        return Decision(engine, _RULE_RESOURCE[engine], RULES, "move on HVX" if moves else "", moves)
    if not node.kernels:  # QNN runs no op of its own for it: folded into another node's kernels, or removed
        return Decision(engine, "none", OPTRACE, node.describe(), moves)
    kernels = node.describe()
    if rule is Engine.MATRIX:
        where = node.resource.upper()
        note = f"QNN's own ops on {where}" + ("" if node.engine == "matrix" else " (no matrix kernel)")
        return Decision(engine, node.resource, OPTRACE, f"{note}: {kernels}")
    if node.moves_only:
        return Decision(engine, node.resource, OPTRACE, f"move on {node.resource.upper()}: {kernels}", True)
    return Decision(engine, node.resource, OPTRACE, kernels)

"""Which Hexagon engine an ONNX op mostly occupies.

    MATRIX  HMX tiles in VTCM: MatMul, Gemm, Conv, ConvTranspose and their integer/QDQ forms
    VECTOR  HVX: elementwise math, activations, norms, Softmax, reductions, pooling, Q/DQ, Cast, Where
    DMA     data movement DDR<->VTCM: Transpose, Concat, Slice, Split, Gather, Pad, Tile, Expand
    FREE    no work on any engine: views (Reshape, Squeeze, ...) and shape arithmetic
    OPAQUE  anything else: control flow, custom domains, unknown ops; never fused, a barrier

The classification is by op type only; the cost model looks at shapes.
"""

from __future__ import annotations

import enum


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

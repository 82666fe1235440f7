"""Which Hexagon engine an op mostly occupies: matrix (HMX), vector (HVX) or dma (moves).

A small private table covering both ONNX op types and QNN op names (the profile CSV names nodes after
the ONNX node, QNN's own ops such as Conv2d/FullyConnected appear in QNN-generated names). The lead's
graph_passes.engines will be the reference for ONNX types; this one is only for reading profiles.
"""
from __future__ import annotations

import re

MATRIX = "matrix"
VECTOR = "vector"
DMA = "dma"
FUSED = "fused"
OTHER = "other"
ENGINES = (MATRIX, VECTOR, DMA)

_MATRIX = {"matmul", "gemm", "conv", "convtranspose", "conv2d", "conv3d", "depthwiseconv2d",
           "transposeconv2d", "fullyconnected", "matmulinteger", "qlinearmatmul", "qlinearconv",
           "convinteger", "batchmatmul"}
_DMA = {"transpose", "concat", "slice", "split", "gather", "gatherelements", "gathernd", "pad",
        "reshape", "flatten", "squeeze", "unsqueeze", "expand", "tile", "depthtospace", "spacetodepth",
        "strided_slice", "stridedslice", "identity", "input", "output", "scatternd", "scatterelements",
        "resize", "upsample", "channelshuffle"}
# Anything else that computes is vector work on HVX: elementwise, activations, softmax, norms,
# reductions, pooling, (de)quantize, casts. Listed so unknown names can be told apart.
_VECTOR = {"add", "sub", "mul", "div", "relu", "sigmoid", "tanh", "gelu", "softmax", "logsoftmax",
           "layernormalization", "batchnormalization", "instancenormalization", "lrn", "maxpool",
           "averagepool", "globalaveragepool", "globalmaxpool", "poolmax2d", "poolavg2d", "reducemean",
           "reducesum", "reducemax", "reducemin", "reduceprod", "quantizelinear", "dequantizelinear",
           "quantize", "dequantize", "cast", "convert", "elementwiseadd", "elementwisemultiply",
           "elementwisesubtract", "elementwisedivide", "exp", "log", "sqrt", "pow", "erf", "neg", "abs",
           "clip", "leakyrelu", "prelu", "hardswish", "hardsigmoid", "where", "min", "max", "equal",
           "greater", "less", "not", "and", "or", "argmax", "argmin", "topk", "cumsum", "rmsnorm",
           "simplifiedlayernormalization", "skiplayernormalization", "softplus", "elu", "selu",
           "reciprocal", "ceil", "floor", "round", "sign", "sin", "cos", "dropout", "relu6",
           "elementwiseneuron", "reducel2", "groupnormalization", "lpnormalization", "meanvariancenormalization"}


def classify(op_type: str) -> str:
    """Engine class of an op type or QNN op name (case and separators ignored)."""
    if op_type.startswith("HexFuse") or op_type == FUSED:
        return FUSED
    key = re.sub(r"[^a-z0-9_]", "", op_type.lower())
    if key in _MATRIX:
        return MATRIX
    if key in _DMA:
        return DMA
    if key in _VECTOR or key.startswith("elementwise") or key.startswith("reduce"):
        return VECTOR
    return OTHER


def op_type_from_name(name: str) -> str:
    """Best guess of an op type from an ORT-generated node name such as 'Softmax4' or 'MatMul_3'."""
    base = name.split("/")[-1]
    return re.sub(r"[_\d]+$", "", base) or name

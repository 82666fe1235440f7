"""Epilogues a target folds into a matrix op: they join the matrix op's unit and cost no HVX time.

    Conv ──> BatchNormalization ──> Mul(c) ──> Add(c) ──> Relu ──>   one matrix unit, where the target folds
    MatMul ─> Add(bias) ──> Gelu ──>                                 BatchNormalization / constant scale-shift
                                                                     / activations

Deployment compilers (QNN's converter, ONNX Runtime's ConvBNFusion / ConvMulFusion / ConvAddFusion /
MatMulAddFusion) fold an inference BatchNormalization, and a multiply or add by a per-output-channel
constant, into the weights and bias of the matrix op before it. Priced apart, such an epilogue would
look like HVX work and be paired with another branch's Conv; folded, it is part of the matrix task.
Which epilogues a target folds is data (``folds`` in qnn_configs/targets/*.json).

An activation (Relu, Clip, LeakyRelu, PRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Gelu) right after a
matrix op, or after its folded epilogues, runs inside QNN's HTP matrix kernel (``ConvLayer.fp16.s1.tcm``
carries the activation's node id and no HVX op runs for it: the committed engine map
models/engines/googlenet.sm8650.json shows all 13 Relus folded into their Conv; docs/engines.md lists
the others, measured the same way). It ends the chain: nothing folds after an activation (a scale after
a Relu is not a change of weights), and its only non-data input (PRelu's slope, Clip's bounds) must be
constant.

An epilogue folds only when it provably can: the matrix op's weights are constant (a MatMul of two
activations, like attention's, has no weights to fold into); the epilogue's data input is the matrix
op's (or a folded epilogue's) only use, float, not a graph output; its other operands are constants;
and the constant varies along the output-channel axis alone (axis 1 of a Conv output, the last axis
of a MatMul/Gemm output), so that folding it into weights and bias is exact.
"""

from __future__ import annotations

import numpy as np

from hexfuse.graph_passes.graph.flat import ONNX_DOMAINS, FlatGraph

BATCH_NORM = "BatchNormalization"
SCALE_SHIFT = ("Mul", "Add")
ACTIVATIONS = ("Relu", "Clip", "LeakyRelu", "PRelu", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish", "Gelu")
FOLDABLE = frozenset({BATCH_NORM, *SCALE_SHIFT, *ACTIVATIONS})
# Matrix ops an epilogue folds into, by where their output channel sits.
_CHANNEL_FIRST = frozenset({"Conv", "ConvTranspose"})  # axis 1
_CHANNEL_LAST = frozenset({"MatMul", "Gemm"})  # last axis
HOSTS = _CHANNEL_FIRST | _CHANNEL_LAST
_FLOATS = ("float32", "float16", "bfloat16", "float64")


def _per_channel(flat: FlatGraph, constant: int, data: int, channel_last: bool) -> bool:
    """The constant broadcasts along the output-channel axis of ``data`` only."""
    out, const = flat.shape(data), flat.shape(constant)
    if out is None or const is None or len(const) > len(out):
        return False
    channel = len(out) - 1 if channel_last else 1
    if channel >= len(out):
        return False
    offset = len(out) - len(const)
    return all(dim == 1 or (offset + axis == channel and dim == out[channel]) for axis, dim in enumerate(const))


def host_marks(flat: FlatGraph, constant: bytearray) -> np.ndarray:
    """Per node: a Conv / MatMul / Gemm whose weights (input 1) are constant, so that epilogues can
    fold into it; for all nodes at once."""
    ptr, ports, input_counts = flat.port_arrays
    matrix = flat.op_marks(lambda op, domain: op in HOSTS and domain in ONNX_DOMAINS)
    has_weights = matrix & (input_counts > 1)
    weights = np.full(flat.node_count, -1, dtype=np.int64)
    weights[has_weights] = ports[ptr[:-1][has_weights] + 1]
    constant_marks = np.append(np.frombuffer(bytes(constant), dtype=np.uint8).astype(bool), False)  # [-1]: omitted
    return has_weights & constant_marks[weights]


def fold_source(flat: FlatGraph, index: int, host_of: dict[int, str], folds: frozenset[str],
                constant: bytearray) -> int | None:
    """The node whose unit ``index`` folds into, or None. ``host_of`` maps matrix hosts and the
    epilogues already folded into them to the host's op type; ``constant`` marks tensors computed
    from constants alone (the runtime folds them, and so can the converter)."""
    op_type = flat.op_types[index]
    if op_type not in folds or flat.domains[index] not in ONNX_DOMAINS:
        return None
    ins, outs = flat.inputs[index], flat.outputs[index]
    if op_type in ACTIVATIONS:
        if not ins or ins[0] < 0 or any(t >= 0 for t in outs[1:]):
            return None
        if op_type == "PRelu" and (len(ins) != 2 or ins[1] < 0 or not constant[ins[1]]):
            return None
        if op_type == "Clip" and any(t >= 0 and not constant[t] for t in ins[1:]):
            return None
        data, constants = ins[0], tuple(ins[1:]) if op_type == "PRelu" else ()
    elif op_type == BATCH_NORM:
        if len(ins) != 5 or any(t < 0 or not constant[t] for t in ins[1:]) or any(t >= 0 for t in outs[1:]):
            return None
        data, constants = ins[0], ()
    else:
        if len(ins) != 2 or ins[0] < 0 or ins[1] < 0:
            return None
        if constant[ins[0]] == constant[ins[1]]:
            return None
        data, constants = (ins[1], (ins[0],)) if constant[ins[0]] else (ins[0], (ins[1],))
    source = flat.producer[data]
    host = host_of.get(source)
    if host is None or flat.op_types[source] in ACTIVATIONS or flat.consumers[data] != [index] or data in flat.graph_outputs:
        return None
    kind = flat.type(data)
    if kind is None or kind.dtype not in _FLOATS or kind.shape is None:
        return None
    channel_last = host in _CHANNEL_LAST
    if op_type == BATCH_NORM and channel_last and len(kind.shape) != 2:
        return None  # BatchNormalization normalises axis 1: the MatMul's channel only for a 2-D output
    if not all(_per_channel(flat, constant, data, channel_last) for constant in constants):
        return None
    return source

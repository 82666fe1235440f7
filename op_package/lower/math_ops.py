"""Elementwise rules: activations / unary maps and numpy-broadcast binary arithmetic (float32)."""

from __future__ import annotations

from hexfuse.op_package.lower.context import (MAX_PARTS, Kernel, NodeContext, broadcast_strides, cpp, dims, kernel,
                                      numel, rank_of, rule)

FLOAT32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max

UNARY = {
    "Relu": "kRelu", "Sigmoid": "kSigmoid", "Tanh": "kTanh", "Erf": "kErf", "Clip": "kClip",
    "LeakyRelu": "kLeakyRelu", "Neg": "kNeg", "Abs": "kAbs", "Exp": "kExp", "Log": "kLog", "Sqrt": "kSqrt",
    "Reciprocal": "kReciprocal", "Sin": "kSin", "Cos": "kCos", "Softplus": "kSoftplus", "Elu": "kElu",
    "HardSigmoid": "kHardSigmoid", "HardSwish": "kHardSwish", "Floor": "kFloor", "Ceil": "kCeil",
    "Gelu": "kGelu", "Dropout": "kIdentity",
    "Sign": "kSign", "Round": "kRound", "Tan": "kTan", "Sinh": "kSinh", "Cosh": "kCosh", "Asin": "kAsin",
    "Acos": "kAcos", "Atan": "kAtan", "Asinh": "kAsinh", "Acosh": "kAcosh", "Atanh": "kAtanh", "Selu": "kSelu",
    "Celu": "kCelu", "Mish": "kMish", "Softsign": "kSoftsign", "ThresholdedRelu": "kThresholdedRelu",
    "Shrink": "kShrink",
}
# (alpha, beta) of the kernel: attribute name and ONNX default for each.
UNARY_CONSTANTS = {
    "LeakyRelu": (("alpha", 0.01), None), "Elu": (("alpha", 1.0), None),
    "HardSigmoid": (("alpha", 0.2), ("beta", 0.5)), "Celu": (("alpha", 1.0), None),
    "ThresholdedRelu": (("alpha", 1.0), None), "Shrink": (("lambd", 0.5), ("bias", 0.0)),
    "Selu": (("alpha", 1.67326319217681884765625), ("gamma", 1.05070102214813232421875)),
}
# Rough cost of one element relative to an add: transcendental maps cost more.
UNARY_COST = {"kRelu": 1, "kNeg": 1, "kAbs": 1, "kClip": 1, "kIdentity": 1, "kFloor": 1, "kCeil": 1,
              "kLeakyRelu": 1, "kReciprocal": 2, "kSqrt": 4, "kSign": 1, "kRound": 1, "kSoftsign": 2,
              "kThresholdedRelu": 1, "kShrink": 1}
BINARY = {"Add": "kAdd", "Sub": "kSub", "Mul": "kMul", "Div": "kDiv", "Pow": "kPow", "Max": "kMax", "Min": "kMin",
          "PRelu": "kPRelu"}


@rule(*UNARY)
def lower_unary(ctx: NodeContext) -> Kernel:
    op_type = ctx.node.op_type
    op = UNARY[op_type]
    ctx.require_float(0)
    if op_type == "Dropout" and ctx.has_output(1):
        raise ctx.fail("the mask output of Dropout is not supported")
    alpha = beta = 0.0
    for slot, spec in enumerate(UNARY_CONSTANTS.get(op_type, (None, None))):
        if spec is not None:
            value = float(ctx.attr(spec[0], spec[1]))
            alpha, beta = (value, beta) if slot == 0 else (alpha, value)
    if op_type == "Celu" and alpha == 0.0:
        raise ctx.fail("alpha=0 is not supported (division by zero)")
    min_buf = max_buf = -1
    if op_type == "Clip":  # opset >= 11: bounds are optional inputs
        # ONNX's defaults are the float limits, not infinities: Clip(inf) with no max is FLT_MAX
        alpha, beta = float(ctx.attr("min", -FLOAT32_MAX)), float(ctx.attr("max", FLOAT32_MAX))
        for i in (1, 2):
            if ctx.has_input(i):
                ctx.require_dtype(ctx.input(i), ("float32",))
        min_buf, max_buf = ctx.in_buf(1), ctx.in_buf(2)
    if op_type == "Gelu" and ctx.attr("approximate", "none") == "tanh":
        op = "kGeluTanh"
    out = ctx.output(0)
    return kernel("unary_f32", "UnaryParams", numel(out.shape), UNARY_COST.get(op, 8),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "op": f"hexfuse::UnaryOp::{op}",
                     "alpha": alpha, "beta": beta, "min_buf": min_buf, "max_buf": max_buf})


@rule(*BINARY)
def lower_binary(ctx: NodeContext) -> Kernel:
    op_type = ctx.node.op_type
    present = [i for i in ctx.node.inputs if i]
    if op_type in ("Max", "Min") and len(present) != 2:
        return lower_variadic(ctx)
    if len(present) != 2 or len(ctx.node.inputs) != 2:
        raise ctx.fail("only the two-input form is supported")
    return _binary(ctx, BINARY[op_type])


def _binary(ctx: NodeContext, op: str) -> Kernel:
    ctx.require_float(0, 1)
    a, b, out = ctx.input(0), ctx.input(1), ctx.output(0)
    out_shape = list(out.shape) or [1]
    rank = rank_of(ctx, out_shape)
    for t in (a, b):
        _require_broadcast(ctx, t.shape, out_shape)
    return kernel("binary_f32", "BinaryParams", numel(out_shape), 8.0 if op in ("kPow", "kFmod") else 1.0,
                  a=ctx.in_buf(0), b=ctx.in_buf(1), out=ctx.out_buf(0),
                  op=f"hexfuse::BinaryOp::{op}", rank=rank, out_dims=dims(out_shape),
                  a_strides=dims(broadcast_strides(a.shape, out_shape)),
                  b_strides=dims(broadcast_strides(b.shape, out_shape)))


def _require_broadcast(ctx: NodeContext, shape, out_shape) -> None:
    if len(shape) > len(out_shape) or any(
            d not in (1, o) for d, o in zip(reversed(list(shape)), reversed(list(out_shape)))):
        raise ctx.fail(f"input shape {list(shape)} does not broadcast to the output shape {list(out_shape)}")


@rule("Sum", "Mean")
def lower_variadic(ctx: NodeContext) -> Kernel:
    op_type = ctx.node.op_type
    names = [n for n in ctx.node.inputs if n]
    if len(names) != len(ctx.node.inputs) or not names:
        raise ctx.fail("omitted inputs are not supported")
    if len(names) > MAX_PARTS:
        raise ctx.fail(f"{len(names)} inputs, at most {MAX_PARTS} are supported")
    ctx.require_float(*range(len(names)))
    out_shape = list(ctx.output(0).shape) or [1]
    rank = rank_of(ctx, out_shape)
    strides = []
    for n in names:
        _require_broadcast(ctx, ctx.tensor(n).shape, out_shape)
        strides.append(dims(broadcast_strides(ctx.tensor(n).shape, out_shape)))
    strides += [dims([])] * (MAX_PARTS - len(names))
    parts = [ctx.buf(n) for n in names] + [0] * (MAX_PARTS - len(names))
    op = {"Sum": "kAdd", "Mean": "kAdd", "Max": "kMax", "Min": "kMin"}[op_type]
    return kernel("variadic_f32", "VariadicParams", numel(out_shape), 2.0 * len(names),
                  out=ctx.out_buf(0), count=len(names), rank=rank, mean=op_type == "Mean",
                  op=f"hexfuse::BinaryOp::{op}", out_dims=dims(out_shape), parts=parts,
                  strides="{{" + ", ".join(cpp(s) for s in strides) + "}}")

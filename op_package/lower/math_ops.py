"""Elementwise rules: activations / unary maps and numpy-broadcast binary arithmetic (float32)."""

from __future__ import annotations

from op_package.lower.context import (Kernel, NodeContext, broadcast_strides, dims, kernel, numel,
                                      rank_of, rule)

UNARY = {
    "Relu": "kRelu", "Sigmoid": "kSigmoid", "Tanh": "kTanh", "Erf": "kErf", "Clip": "kClip",
    "LeakyRelu": "kLeakyRelu", "Neg": "kNeg", "Abs": "kAbs", "Exp": "kExp", "Log": "kLog", "Sqrt": "kSqrt",
    "Reciprocal": "kReciprocal", "Sin": "kSin", "Cos": "kCos", "Softplus": "kSoftplus", "Elu": "kElu",
    "HardSigmoid": "kHardSigmoid", "HardSwish": "kHardSwish", "Floor": "kFloor", "Ceil": "kCeil",
    "Gelu": "kGelu", "Dropout": "kIdentity",
}
# Rough cost of one element relative to an add: transcendental maps cost more.
UNARY_COST = {"kRelu": 1, "kNeg": 1, "kAbs": 1, "kClip": 1, "kIdentity": 1, "kFloor": 1, "kCeil": 1,
              "kLeakyRelu": 1, "kReciprocal": 2, "kSqrt": 4}
BINARY = {"Add": "kAdd", "Sub": "kSub", "Mul": "kMul", "Div": "kDiv", "Pow": "kPow", "Max": "kMax", "Min": "kMin"}


@rule(*UNARY)
def lower_unary(ctx: NodeContext) -> Kernel:
    op_type = ctx.node.op_type
    op = UNARY[op_type]
    ctx.require_float(0)
    if op_type == "Dropout" and ctx.has_output(1):
        raise ctx.fail("the mask output of Dropout is not supported")
    alpha = float(ctx.attr("alpha", {"LeakyRelu": 0.01, "Elu": 1.0, "HardSigmoid": 0.2}.get(op_type, 0.0)))
    beta = float(ctx.attr("beta", 0.5 if op_type == "HardSigmoid" else 0.0))
    min_buf = max_buf = -1
    if op_type == "Clip":  # opset >= 11: bounds are optional inputs
        alpha, beta = float(ctx.attr("min", float("-inf"))), float(ctx.attr("max", float("inf")))
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
    if len([i for i in ctx.node.inputs if i]) != 2:
        raise ctx.fail("only the two-input form is supported")
    ctx.require_float(0, 1)
    a, b, out = ctx.input(0), ctx.input(1), ctx.output(0)
    out_shape = list(out.shape) or [1]
    rank = rank_of(ctx, out_shape)
    return kernel("binary_f32", "BinaryParams", numel(out_shape), 1.0 if BINARY[ctx.node.op_type] != "kPow" else 8.0,
                  a=ctx.in_buf(0), b=ctx.in_buf(1), out=ctx.out_buf(0),
                  op=f"hexfuse::BinaryOp::{BINARY[ctx.node.op_type]}", rank=rank, out_dims=dims(out_shape),
                  a_strides=dims(broadcast_strides(a.shape, out_shape)),
                  b_strides=dims(broadcast_strides(b.shape, out_shape)))

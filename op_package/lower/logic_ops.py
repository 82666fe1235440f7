"""Typed elementwise rules: comparisons and boolean logic (bool outputs), integer Mod, Where (any dtype),
IsNaN / IsInf and Not. numpy broadcasting as in math_ops."""

from __future__ import annotations

from hexfuse.op_package.lower.context import (CPP_DTYPE, ELEMENT_SIZE, INT_DTYPES, Kernel, NodeContext, broadcast_strides,
                                      dims, kernel, numel, rank_of, rule)
from hexfuse.op_package.lower.math_ops import _binary, _require_broadcast

COMPARE = {"Equal": "kEqual", "Less": "kLess", "Greater": "kGreater", "LessOrEqual": "kLessOrEqual",
           "GreaterOrEqual": "kGreaterOrEqual"}
LOGIC = {"And": "kAnd", "Or": "kOr", "Xor": "kXor"}
NUMERIC = ("float32",) + INT_DTYPES


def _two_inputs(ctx: NodeContext) -> None:
    if len(ctx.node.inputs) != 2 or not all(ctx.node.inputs):
        raise ctx.fail("expects exactly two inputs")


def _typed(ctx: NodeContext, op: str, dtype: str) -> Kernel:
    a, b, out = ctx.input(0), ctx.input(1), ctx.output(0)
    out_shape = list(out.shape) or [1]
    rank = rank_of(ctx, out_shape)
    for t in (a, b):
        _require_broadcast(ctx, t.shape, out_shape)
    return kernel("typed_binary", "TypedBinaryParams", numel(out_shape), 1.0,
                  a=ctx.in_buf(0), b=ctx.in_buf(1), out=ctx.out_buf(0), op=f"hexfuse::TypedOp::{op}",
                  type=f"hexfuse::DType::{CPP_DTYPE[dtype]}", rank=rank, out_dims=dims(out_shape),
                  a_strides=dims(broadcast_strides(a.shape, out_shape)),
                  b_strides=dims(broadcast_strides(b.shape, out_shape)))


@rule(*COMPARE)
def lower_compare(ctx: NodeContext) -> Kernel:
    _two_inputs(ctx)
    a = ctx.input(0)
    ctx.require_dtype(a, NUMERIC + (("bool",) if ctx.node.op_type == "Equal" else ()))
    ctx.require_dtype(ctx.input(1), (a.dtype,))
    ctx.require_dtype(ctx.output(0), ("bool",))
    return _typed(ctx, COMPARE[ctx.node.op_type], a.dtype)


@rule(*LOGIC)
def lower_logic(ctx: NodeContext) -> Kernel:
    _two_inputs(ctx)
    for t in (ctx.input(0), ctx.input(1), ctx.output(0)):
        ctx.require_dtype(t, ("bool",))
    return _typed(ctx, LOGIC[ctx.node.op_type], "bool")


@rule("Mod")
def lower_mod(ctx: NodeContext) -> Kernel:
    _two_inputs(ctx)
    a = ctx.input(0)
    fmod = int(ctx.attr("fmod", 0))
    if a.dtype == "float32":
        if not fmod:
            raise ctx.fail("float inputs need fmod=1 (ONNX)")
        return _binary(ctx, "kFmod")
    ctx.require_dtype(a, INT_DTYPES)
    ctx.require_dtype(ctx.input(1), (a.dtype,))
    ctx.require_dtype(ctx.output(0), (a.dtype,))
    return _typed(ctx, "kFmod" if fmod else "kMod", a.dtype)


@rule("Where")
def lower_where(ctx: NodeContext) -> Kernel:
    if len(ctx.node.inputs) != 3 or not all(ctx.node.inputs):
        raise ctx.fail("expects exactly three inputs")
    cond, x, y, out = ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0)
    ctx.require_dtype(cond, ("bool",))
    ctx.require_dtype(out, tuple(ELEMENT_SIZE))
    ctx.require_dtype(x, (out.dtype,))
    ctx.require_dtype(y, (out.dtype,))
    out_shape = list(out.shape) or [1]
    rank = rank_of(ctx, out_shape)
    for t in (cond, x, y):
        _require_broadcast(ctx, t.shape, out_shape)
    return kernel("where_any", "WhereParams", numel(out_shape), 1.0,
                  cond=ctx.in_buf(0), x=ctx.in_buf(1), y=ctx.in_buf(2), out=ctx.out_buf(0),
                  elem_size=ELEMENT_SIZE[out.dtype], rank=rank, out_dims=dims(out_shape),
                  cond_strides=dims(broadcast_strides(cond.shape, out_shape)),
                  x_strides=dims(broadcast_strides(x.shape, out_shape)),
                  y_strides=dims(broadcast_strides(y.shape, out_shape)))


@rule("IsNaN", "IsInf")
def lower_classify(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, outputs=())
    ctx.require_dtype(ctx.output(0), ("bool",))
    is_inf = ctx.node.op_type == "IsInf"
    return kernel("classify_f32", "ClassifyParams", numel(ctx.output(0).shape), 1.0,
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "kind": int(is_inf),
                     "detect_positive": int(ctx.attr("detect_positive", 1)) if is_inf else 1,
                     "detect_negative": int(ctx.attr("detect_negative", 1)) if is_inf else 1})


@rule("Not")
def lower_not(ctx: NodeContext) -> Kernel:
    ctx.require_dtype(ctx.input(0), ("bool",))
    ctx.require_dtype(ctx.output(0), ("bool",))
    return kernel("not_bool", "NotParams", numel(ctx.output(0).shape), 1.0,
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0)})

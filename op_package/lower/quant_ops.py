"""QDQ boundary rules: DequantizeLinear and QuantizeLinear, per-tensor or per-axis (no blocked quantization).

Between a DQ and a Q the float kernels compute, as ONNX Runtime's reference QDQ semantics do."""

from __future__ import annotations

from hexfuse.op_package.lower.context import CPP_DTYPE, Kernel, NodeContext, kernel, numel, rule

QUANT_DTYPES = ("uint8", "int8", "uint16", "int16")


def _axis_params(ctx: NodeContext, data_shape: tuple[int, ...]) -> dict[str, int]:
    if int(ctx.attr("block_size", 0)):
        raise ctx.fail("blocked quantization (block_size) is not supported")
    scale = ctx.input(1)
    ctx.require_dtype(scale, ("float32",))
    n = numel(scale.shape)
    if n == 1:
        return {"axis_len": 1, "inner": 1}
    axis = ctx.axis(int(ctx.attr("axis", 1)), len(data_shape))
    if data_shape[axis] != n:
        raise ctx.fail(f"per-axis scale of {n} values does not match axis {axis} of {data_shape}")
    return {"axis_len": n, "inner": numel(data_shape[axis + 1:])}


@rule("DequantizeLinear")
def lower_dequantize(ctx: NodeContext) -> Kernel:
    x = ctx.input(0)
    ctx.require_dtype(x, QUANT_DTYPES + ("int32",))
    ctx.require_dtype(ctx.output(0), ("float32",))
    if ctx.has_input(2):
        ctx.require_dtype(ctx.input(2), (x.dtype,))
    return kernel("dequantize", "QuantParams", numel(x.shape), 2.0,
                  x=ctx.in_buf(0), scale=ctx.in_buf(1), zero_point=ctx.in_buf(2), out=ctx.out_buf(0),
                  qtype=f"hexfuse::DType::{CPP_DTYPE[x.dtype]}", **_axis_params(ctx, x.shape))


@rule("QuantizeLinear")
def lower_quantize(ctx: NodeContext) -> Kernel:
    x, y = ctx.input(0), ctx.output(0)
    ctx.require_dtype(x, ("float32",))
    ctx.require_dtype(y, QUANT_DTYPES)
    if int(ctx.attr("saturate", 1)) != 1:
        raise ctx.fail("saturate=0 is not supported")
    return kernel("quantize", "QuantParams", numel(x.shape), 3.0,
                  x=ctx.in_buf(0), scale=ctx.in_buf(1), zero_point=ctx.in_buf(2), out=ctx.out_buf(0),
                  qtype=f"hexfuse::DType::{CPP_DTYPE[y.dtype]}", **_axis_params(ctx, x.shape))

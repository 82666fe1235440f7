"""Matrix rules: MatMul (numpy batch broadcasting), Gemm, Conv (any groups/pads/strides/dilations)."""

from __future__ import annotations

from hexfuse.op_package.lower.context import (Kernel, NodeContext, broadcast_strides, dims, kernel, numel, rule,
                                      MAX_RANK)


@rule("MatMul")
def lower_matmul(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, 1)
    a, b = ctx.input(0), ctx.input(1)
    a_shape = [1] + list(a.shape) if len(a.shape) == 1 else list(a.shape)  # numpy promotion of 1-D
    b_shape = list(b.shape) + [1] if len(b.shape) == 1 else list(b.shape)
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ctx.fail("scalar operands are not supported")
    M, K = a_shape[-2:]
    K2, N = b_shape[-2:]
    if K != K2:
        raise ctx.fail(f"inner dimensions differ ({K} vs {K2})")
    batch = _batch_dims(a_shape, b_shape)
    if len(batch) > MAX_RANK:
        raise ctx.fail("too many batch dimensions")
    a_strides = broadcast_strides(a_shape[:-2], batch) if batch else []
    b_strides = broadcast_strides(b_shape[:-2], batch) if batch else []
    return kernel("matmul_f32", "MatMulParams", numel(batch) * M, 2.0 * N * K,
                  a=ctx.in_buf(0), b=ctx.in_buf(1), c=-1, out=ctx.out_buf(0), M=M, N=N, K=K,
                  batch_rank=len(batch), batch_dims=dims(batch),
                  a_batch_strides=dims([s * M * K for s in a_strides]),
                  b_batch_strides=dims([s * K * N for s in b_strides]))


def _batch_dims(a_shape: list[int], b_shape: list[int]) -> list[int]:
    a_b, b_b = a_shape[:-2], b_shape[:-2]
    n = max(len(a_b), len(b_b))
    a_b, b_b = [1] * (n - len(a_b)) + a_b, [1] * (n - len(b_b)) + b_b
    return [max(x, y) for x, y in zip(a_b, b_b)]


@rule("Gemm")
def lower_gemm(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, 1, 2)
    a, b = ctx.input(0), ctx.input(1)
    trans_a, trans_b = int(ctx.attr("transA", 0)), int(ctx.attr("transB", 0))
    if len(a.shape) != 2 or len(b.shape) != 2:
        raise ctx.fail("Gemm operands must be 2-D")
    M, K = (a.shape[1], a.shape[0]) if trans_a else a.shape
    N = b.shape[0] if trans_b else b.shape[1]
    c_stride_m = c_stride_n = 0
    if ctx.has_input(2):
        c_shape = list(ctx.input(2).shape)
        strides = broadcast_strides(c_shape, [M, N])
        c_stride_m, c_stride_n = strides
    return kernel("matmul_f32", "MatMulParams", M, 2.0 * N * K,
                  a=ctx.in_buf(0), b=ctx.in_buf(1), c=ctx.in_buf(2), out=ctx.out_buf(0), M=M, N=N, K=K,
                  batch_rank=0, trans_a=trans_a, trans_b=trans_b, alpha=float(ctx.attr("alpha", 1.0)),
                  beta=float(ctx.attr("beta", 1.0)), c_stride_m=c_stride_m, c_stride_n=c_stride_n)


def spatial(ctx: NodeContext, shape: tuple[int, ...]) -> list[int]:
    """H, W of an NC(H)W shape; 1-D ops get H = 1."""
    if len(shape) == 3:
        return [1, shape[2]]
    if len(shape) == 4:
        return [shape[2], shape[3]]
    raise ctx.fail(f"only 1-D and 2-D spatial shapes are supported, got rank {len(shape)}")


def window(ctx: NodeContext, in_hw: list[int], out_hw: list[int], k_hw: list[int], n: int) -> dict[str, int]:
    """Strides, dilations and explicit pads of a conv/pool window, 1-D lifted to 2-D (H = 1)."""
    lift = 2 - n
    strides = [1] * lift + list(ctx.attr("strides", (1,) * n))
    dil = [1] * lift + list(ctx.attr("dilations", (1,) * n))
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    if auto_pad == "NOTSET":
        raw = list(ctx.attr("pads", (0,) * (2 * n)))
        begin, end = [0] * lift + raw[:n], [0] * lift + raw[n:]
    elif auto_pad == "VALID":
        begin, end = [0, 0], [0, 0]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        begin, end = [], []
        for i, o, k, s, d in zip(in_hw, out_hw, k_hw, strides, dil):
            total = max(0, (o - 1) * s + (k - 1) * d + 1 - i)
            small, big = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else big)
            end.append(big if auto_pad == "SAME_UPPER" else small)
    else:
        raise ctx.fail(f"auto_pad={auto_pad!r} is not supported")
    return {"stride_h": strides[0], "stride_w": strides[1], "dil_h": dil[0], "dil_w": dil[1],
            "pad_t": begin[0], "pad_l": begin[1], "pad_b": end[0], "pad_r": end[1]}


@rule("Conv")
def lower_conv(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, 1, 2)
    x, w, out = ctx.input(0), ctx.input(1), ctx.output(0)
    in_hw, out_hw = spatial(ctx, x.shape), spatial(ctx, out.shape)
    k_hw = [1] * (4 - len(w.shape)) + list(w.shape[2:])
    win = window(ctx, in_hw, out_hw, k_hw, len(x.shape) - 2)
    group = int(ctx.attr("group", 1))
    N, C = x.shape[:2]
    M = w.shape[0]
    if C % group or M % group or w.shape[1] != C // group:
        raise ctx.fail(f"weights {w.shape} do not match {C} channels in {group} groups")
    macs_per_plane = out_hw[0] * out_hw[1] * (C // group) * k_hw[0] * k_hw[1]
    return kernel("conv_f32", "ConvParams", N * M, 2.0 * macs_per_plane,
                  x=ctx.in_buf(0), w=ctx.in_buf(1), b=ctx.in_buf(2), out=ctx.out_buf(0), N=N, C=C,
                  H=in_hw[0], W=in_hw[1], M=M, OH=out_hw[0], OW=out_hw[1], KH=k_hw[0], KW=k_hw[1],
                  stride_h=win["stride_h"], stride_w=win["stride_w"], dil_h=win["dil_h"], dil_w=win["dil_w"],
                  pad_t=win["pad_t"], pad_l=win["pad_l"], group=group)

"""Rules of the quantized vector kernels (qvector.h). Their nodes never come from a model: the QDQ fusion
(qdq_fusion.py) writes them into a task in place of DequantizeLinear -> op -> QuantizeLinear units,
with the generation-time constants (tables, multipliers, zero points) as attributes. The rules check
those constants against the kernels' bounds and add what depends on buffers and shapes."""

from __future__ import annotations

from typing import Sequence

from hexfuse.op_package.lower.context import (CPP_DTYPE, MAX_RANK, Kernel, NodeContext, broadcast_strides, dims, kernel,
                                              numel, rule)
from hexfuse.op_package.lower.linalg import spatial, window
from hexfuse.op_package.lower.qfixed import ADD_MULT_MAX, MEAN_MULT_MAX, MUL_MULT_MAX, SHIFT_MAX_32, SHIFT_MAX_64
from hexfuse.op_package.lower.qlut import QTYPES, vlut32_order

QLOOKUP = "HexfuseQLookup"
QBINARY = "HexfuseQBinary"
QROWMEAN = "HexfuseQRowMean"
QSOFTMAX = "HexfuseQSoftmax"
QMAXPOOL = "HexfuseQMaxPool"
QDEQUANTIZE = "HexfuseQDequantize"  # codes of a port -> float (qdq_ports.py)
QQUANTIZE = "HexfuseQQuantize"  # float -> codes of a port
INTERNAL_OPS = (QLOOKUP, QBINARY, QROWMEAN, QSOFTMAX, QMAXPOOL, QDEQUANTIZE, QQUANTIZE)  # never in a model  # reserved: a model node with one of these names is refused
BINARY_OPS = {"Add": 0, "Sub": 1, "Mul": 2}  # = HEXFUSE_QADD / QSUB / QMUL (qarith.h)
QPOOL_ROW = 1024  # = kQPoolRow (qvector.h): the padded row of a max pool lives on the stack


def _int(ctx: NodeContext, name: str, lo: int, hi: int) -> int:
    value = ctx.attr(name)
    if not isinstance(value, int) or not lo <= value <= hi:
        raise ctx.fail(f"attribute {name}={value!r} is outside [{lo}, {hi}]")
    return value


def _table(ctx: NodeContext, name: str) -> list[int]:
    lut = ctx.attr(name)
    if not (isinstance(lut, tuple) and len(lut) == 256 and all(isinstance(v, int) and 0 <= v <= 255 for v in lut)):
        raise ctx.fail(f"attribute {name} must hold 256 bytes")
    return list(lut)


def _codes(ctx: NodeContext, *indices: int, outputs: Sequence[int] = (0,)) -> bool:
    """Requires one 8-bit type on the given inputs and outputs; True when it is int8."""
    found = {ctx.input(i).dtype for i in indices} | {ctx.output(i).dtype for i in outputs}
    if len(found) != 1 or not found <= set(QTYPES):
        raise ctx.fail(f"needs one 8-bit code type on its tensors, got {sorted(found)}")
    return found == {"int8"}


def _zero(ctx: NodeContext, name: str, signed: bool) -> int:
    lo, hi = QTYPES["int8" if signed else "uint8"]
    return _int(ctx, name, lo, hi)


@rule(QLOOKUP)
def lower_qlookup(ctx: NodeContext) -> Kernel:
    x, y = ctx.input(0), ctx.output(0)
    for t in (x, y):
        ctx.require_dtype(t, tuple(QTYPES))
    if numel(x.shape) != numel(y.shape):
        raise ctx.fail("input and output sizes differ")
    lut = _table(ctx, "lut")
    return kernel("qlookup_u8", "QLookupParams", numel(y.shape), 0.5,
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "lut": list(lut),
                     "hvx_lut": [int(v) for v in vlut32_order(lut)]})


def coalesce(out_shape: Sequence[int], *strides: Sequence[int]) -> tuple[list[int], list[list[int]]]:
    """Merges adjacent dims that every operand walks the same way (contiguous, or broadcast), and drops
    size-1 dims: a same-shape operand becomes one run, a row broadcast two dims (the kernel's runs and
    HVX vectors follow the last dim)."""
    kept: list[tuple[int, list[int]]] = []  # innermost first
    for d in range(len(out_shape) - 1, -1, -1):
        n, s = out_shape[d], [st[d] for st in strides]
        if n == 1:
            continue
        if kept and all(si == ki * kept[-1][0] for si, ki in zip(s, kept[-1][1])):
            kept[-1] = (kept[-1][0] * n, kept[-1][1])
        else:
            kept.append((n, s))
    kept = kept or [(1, [0] * len(strides))]
    kept.reverse()
    return [n for n, _ in kept], [[s[k] for _, s in kept] for k in range(len(strides))]


@rule(QBINARY)
def lower_qbinary(ctx: NodeContext) -> Kernel:
    signed = _codes(ctx, 0, 1)
    a, b, out = ctx.input(0), ctx.input(1), ctx.output(0)
    op = ctx.attr("op")
    if op not in BINARY_OPS:
        raise ctx.fail(f"attribute op={op!r} is not one of {sorted(BINARY_OPS)}")
    mult_max = MUL_MULT_MAX if op == "Mul" else ADD_MULT_MAX
    out_shape = list(out.shape) or [1]
    for t in (a, b):
        if len(t.shape) > len(out_shape) or any(d not in (1, o) for d, o in zip(reversed(t.shape), reversed(out_shape))):
            raise ctx.fail(f"input shape {list(t.shape)} does not broadcast to the output shape {out_shape}")
    shape, (a_strides, b_strides) = coalesce(out_shape, broadcast_strides(a.shape, out_shape),
                                             broadcast_strides(b.shape, out_shape))
    if len(shape) > MAX_RANK:
        raise ctx.fail(f"rank {len(shape)} is above the supported {MAX_RANK}")
    a_mult, b_mult = _int(ctx, "a_mult", -mult_max, mult_max), _int(ctx, "b_mult", -mult_max, mult_max)
    za, zb = _zero(ctx, "a_zero", signed), _zero(ctx, "b_zero", signed)
    arith = {"op": BINARY_OPS[op], "is_signed": int(signed), "a_zero": za, "b_zero": zb,
             "out_zero": _zero(ctx, "out_zero", signed), "a_mult": a_mult, "b_mult": b_mult,
             "bias": 0 if op == "Mul" else -a_mult * za - b_mult * zb, "shift": _int(ctx, "shift", 1, SHIFT_MAX_32)}
    return kernel("qbinary_8", "QBinaryParams", numel(out_shape), 1.0,
                  a=ctx.in_buf(0), b=ctx.in_buf(1), out=ctx.out_buf(0), rank=len(shape), out_dims=dims(shape),
                  a_strides=dims(a_strides), b_strides=dims(b_strides),
                  **{f"arith.{k}": v for k, v in arith.items()})


def _rows(ctx: NodeContext) -> tuple[int, int]:
    length = _int(ctx, "len", 1, (1 << 31) - 1)
    total = numel(ctx.input(0).shape)
    if total % length:
        raise ctx.fail(f"row length {length} does not divide the input's {total} elements")
    return total // length, length


@rule(QROWMEAN)
def lower_qrowmean(ctx: NodeContext) -> Kernel:
    signed = _codes(ctx, 0)
    rows, length = _rows(ctx)
    if numel(ctx.output(0).shape) != rows:
        raise ctx.fail(f"output holds {numel(ctx.output(0).shape)} elements, expected one per row ({rows})")
    return kernel("qrowmean_8", "QRowMeanParams", rows, 0.5 * length,
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "is_signed": int(signed), "len": length,
                     "in_zero": _zero(ctx, "in_zero", signed), "out_zero": _zero(ctx, "out_zero", signed),
                     "mult": _int(ctx, "mult", 0, MEAN_MULT_MAX), "shift": _int(ctx, "shift", 1, SHIFT_MAX_64)})


@rule(QSOFTMAX)
def lower_qsoftmax(ctx: NodeContext) -> Kernel:
    x, y = ctx.input(0), ctx.output(0)
    for t in (x, y):
        ctx.require_dtype(t, tuple(QTYPES))
    rows, length = _rows(ctx)
    table = ctx.attr("exp_table")
    if not (isinstance(table, tuple) and len(table) == 256 and all(isinstance(v, float) and 0.0 <= v <= 1.0 for v in table)):
        raise ctx.fail("attribute exp_table must hold 256 values in [0, 1]")
    scale = ctx.attr("out_scale")
    if not isinstance(scale, float) or not scale > 0.0:
        raise ctx.fail(f"attribute out_scale={scale!r} must be a positive float")
    return kernel("qsoftmax_8", "QSoftmaxParams", rows, 8.0 * length,
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "in_signed": int(x.dtype == "int8"),
                     "out_signed": int(y.dtype == "int8"), "len": length, "out_scale": scale,
                     "out_zero": _zero(ctx, "out_zero", y.dtype == "int8"), "exp_table": list(table)})


def maxpool_geometry(ctx: NodeContext) -> dict[str, int]:
    """PoolParams of a MaxPool / GlobalMaxPool node (attributes as ONNX's), refusing windows that hold no
    input element and rows wider than the kernel's stack row."""
    x, y = ctx.input(0), ctx.output(0)
    ctx.refuse_attrs(storage_order=lambda v: int(v) != 0)
    in_hw, out_hw = spatial(ctx, x.shape), spatial(ctx, y.shape)
    if ctx.attr("global", 0):
        k_hw = in_hw
        win = {"stride_h": 1, "stride_w": 1, "dil_h": 1, "dil_w": 1, "pad_t": 0, "pad_l": 0, "pad_b": 0, "pad_r": 0}
    else:
        k_hw = [1] * (4 - len(x.shape)) + list(ctx.attr("kernel_shape"))  # type: ignore[arg-type]
        win = window(ctx, in_hw, out_hw, k_hw, len(x.shape) - 2)
    for axis, (size, out, k, stride, dil, pad) in enumerate(zip(in_hw, out_hw, k_hw, (win["stride_h"], win["stride_w"]),
                                                                (win["dil_h"], win["dil_w"]), (win["pad_t"], win["pad_l"]))):
        for o in range(out):
            if not any(0 <= o * stride - pad + t * dil < size for t in range(k)):
                raise ctx.fail(f"output {o} along spatial axis {axis} has a window without input elements")
    row = max(win["pad_l"] + in_hw[1], (out_hw[1] - 1) * win["stride_w"] + (k_hw[1] - 1) * win["dil_w"] + 1)
    if row > QPOOL_ROW:
        raise ctx.fail(f"padded rows of {row} codes are wider than the kernel's {QPOOL_ROW}")
    return {"H": in_hw[0], "W": in_hw[1], "OH": out_hw[0], "OW": out_hw[1], "KH": k_hw[0], "KW": k_hw[1], **win}


@rule(QMAXPOOL)
def lower_qmaxpool(ctx: NodeContext) -> Kernel:
    x, y = ctx.input(0), ctx.output(0)
    for t in (x, y):
        ctx.require_dtype(t, tuple(QTYPES))
    if x.dtype != y.dtype and not ctx.attr("lut"):
        raise ctx.fail("input and output code types differ without a requantizing table")
    g = maxpool_geometry(ctx)
    lut = _table(ctx, "lut") if ctx.attr("lut") else [0] * 256
    return kernel("qmaxpool_8", "QMaxPoolParams", x.shape[0] * x.shape[1], float(g["OH"] * g["W"] * (g["KH"] + g["KW"])),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "is_signed": int(x.dtype == "int8"),
                     "has_lut": int(bool(ctx.attr("lut"))), "lut": lut, **{f"pool.{k}": v for k, v in g.items()}})


PORT_CODES = ("uint8", "int8", "uint16", "int16")


@rule(QDEQUANTIZE, QQUANTIZE)
def lower_port_convert(ctx: NodeContext) -> Kernel:
    dequantize = ctx.node.op_type == QDEQUANTIZE
    codes, other = (ctx.input(0), ctx.output(0)) if dequantize else (ctx.output(0), ctx.input(0))
    ctx.require_dtype(codes, PORT_CODES)
    ctx.require_dtype(other, ("float32",))
    q = codes.quant
    if q is None or len(q.scale) != 1 or q.dtype != codes.dtype or not q.scale[0] > 0.0:
        raise ctx.fail(f"tensor {codes.name!r} needs a per-tensor encoding of its own type")
    return kernel("qdequantize_port" if dequantize else "qquantize_port", "QConvertParams", numel(codes.shape),
                  2.0, **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "qtype": f"hexfuse::DType::{CPP_DTYPE[codes.dtype]}",
                          "scale": q.scale[0], "zero": q.zero_point[0]})

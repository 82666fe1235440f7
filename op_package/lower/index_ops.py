"""Index-driven DMA rules: Pad, Tile, Trilu, ReverseSequence, GatherElements, GatherND, ScatterND,
DepthToSpace / SpaceToDepth (6-D strided copies), and the index reductions ArgMax / ArgMin / CumSum.
Runtime-valued inputs (pads, k, sequence_lens, the CumSum axis) are read by the kernels."""

from __future__ import annotations

from hexfuse.op_package.lower.context import (CPP_DTYPE, ELEMENT_SIZE, INDEX_DTYPES, Kernel, NodeContext, dims, kernel,
                                      numel, rank_of, rule, strides_of)

PAD_MODES = {"constant": "kConstant", "reflect": "kReflect", "edge": "kEdge", "wrap": "kWrap"}


def _elem(ctx: NodeContext) -> int:
    data, out = ctx.input(0), ctx.output(0)
    ctx.require_dtype(out, tuple(ELEMENT_SIZE))
    ctx.require_dtype(data, (out.dtype,))
    return ELEMENT_SIZE[out.dtype]


def _index_type(ctx: NodeContext, i: int) -> str:
    ctx.require_dtype(ctx.input(i), INDEX_DTYPES)
    return f"hexfuse::DType::{CPP_DTYPE[ctx.input(i).dtype]}"


@rule("Pad")
def lower_pad(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x, out = ctx.input(0), ctx.output(0)
    rank = rank_of(ctx, x.shape)
    if len(x.shape) != len(out.shape):
        raise ctx.fail("output rank differs from the input rank")
    mode = ctx.attr("mode", "constant")
    if mode not in PAD_MODES:
        raise ctx.fail(f"mode={mode!r} is not supported")
    if mode != "constant" and any(d == 0 for d in x.shape):
        raise ctx.fail(f"mode={mode!r} needs a non-empty input")
    fields: dict[str, object] = {"in": ctx.in_buf(0), "out": ctx.out_buf(0), "elem_size": elem, "rank": rank,
                                 "in_dims": dims(x.shape), "out_dims": dims(out.shape),
                                 "mode": f"hexfuse::PadMode::{PAD_MODES[mode]}"}
    if "pads" in ctx.node.attributes:  # opset < 11: static attributes
        pads = [int(v) for v in ctx.attr("pads")]
        if len(pads) != 2 * len(x.shape):
            raise ctx.fail(f"{len(pads)} pads for rank {len(x.shape)}")
        value = float(ctx.attr("value", 0.0))
        if value != 0.0 and x.dtype != "float32":
            raise ctx.fail("a non-zero value attribute needs float32 data")
        fields.update(static_begin=dims(pads[:len(x.shape)]), static_value=value)
    else:
        pads = ctx.input(1)
        ctx.require_dtype(pads, ("int64",))
        count = numel(pads.shape)
        if ctx.has_input(3):
            axes = ctx.input(3)
            fields.update(axes=ctx.in_buf(3), axes_type=_index_type(ctx, 3), axes_count=numel(axes.shape))
            if count != 2 * numel(axes.shape):
                raise ctx.fail(f"{count} pads for {numel(axes.shape)} axes")
        elif count != 2 * len(x.shape):
            raise ctx.fail(f"{count} pads for rank {len(x.shape)}")
        if ctx.has_input(2):
            value = ctx.input(2)
            ctx.require_dtype(value, (x.dtype,))
            if numel(value.shape) != 1:
                raise ctx.fail("constant_value must be a scalar")
            fields["value"] = ctx.in_buf(2)
        fields.update(pads=ctx.in_buf(1), pads_type="hexfuse::DType::kI64")
    return kernel("pad_any", "PadParams", numel(out.shape), float(elem * 4), **fields)


@rule("Tile")
def lower_tile(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x, out = ctx.input(0), ctx.output(0)
    rank = rank_of(ctx, x.shape)
    if len(x.shape) != len(out.shape) or any(o % i for i, o in zip(x.shape, out.shape)):
        raise ctx.fail(f"output shape {list(out.shape)} is not a tiling of {list(x.shape)}")
    return kernel("tile_any", "TileParams", numel(out.shape), float(elem * 4),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "elem_size": elem, "rank": rank,
                     "in_dims": dims(x.shape), "out_dims": dims(out.shape)})


@rule("Trilu")
def lower_trilu(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.fail("input must be at least 2-D")
    if ctx.has_input(1):
        ctx.require_dtype(ctx.input(1), ("int64",))
    return kernel("trilu_any", "TriluParams", numel(x.shape), float(elem),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "k": ctx.in_buf(1), "elem_size": elem,
                     "rows": x.shape[-2], "cols": x.shape[-1], "upper": int(ctx.attr("upper", 1))})


@rule("ReverseSequence")
def lower_reverse_sequence(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.fail("input must be at least 2-D")
    rank = rank_of(ctx, x.shape)
    batch, time = int(ctx.attr("batch_axis", 1)), int(ctx.attr("time_axis", 0))
    if {batch, time} != {0, 1}:
        raise ctx.fail(f"batch_axis={batch}, time_axis={time}: must be 0 and 1")
    return kernel("reverse_sequence_any", "ReverseSequenceParams", numel(x.shape), float(elem * 4),
                  **{"in": ctx.in_buf(0), "lens": ctx.in_buf(1), "out": ctx.out_buf(0), "elem_size": elem,
                     "rank": rank, "batch_axis": batch, "time_axis": time, "dims": dims(x.shape),
                     "lens_type": _index_type(ctx, 1)})


@rule("GatherElements")
def lower_gather_elements(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    data, indices = ctx.input(0), ctx.input(1)
    rank = rank_of(ctx, data.shape)
    if len(indices.shape) != len(data.shape):
        raise ctx.fail("indices rank differs from the data rank")
    return kernel("gather_elements_any", "GatherElementsParams", numel(indices.shape), float(elem * 4),
                  data=ctx.in_buf(0), indices=ctx.in_buf(1), out=ctx.out_buf(0), elem_size=elem, rank=rank,
                  axis=ctx.axis(int(ctx.attr("axis", 0)), len(data.shape)), out_dims=dims(indices.shape),
                  data_dims=dims(data.shape), index_type=_index_type(ctx, 1))


def _nd_index(ctx: NodeContext, data_shape, indices_shape, batch: int) -> dict[str, object]:
    if not indices_shape:
        raise ctx.fail("indices must be at least 1-D")
    k = indices_shape[-1]
    if not 1 <= k <= len(data_shape) - batch:
        raise ctx.fail(f"index tuples of length {k} do not fit data of rank {len(data_shape)}")
    strides = strides_of(data_shape)
    return {"k": k, "index_dims": dims(data_shape[batch:batch + k]),
            "index_strides": dims(strides[batch:batch + k]), "slice_size": numel(data_shape[batch + k:])}


@rule("GatherND")
def lower_gather_nd(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    data, indices = ctx.input(0), ctx.input(1)
    ctx.require_dtype(indices, ("int64",))
    rank_of(ctx, data.shape)
    batch = int(ctx.attr("batch_dims", 0))
    if batch < 0 or batch >= len(indices.shape) or tuple(data.shape[:batch]) != tuple(indices.shape[:batch]):
        raise ctx.fail(f"batch_dims={batch} does not match data {list(data.shape)} and indices {list(indices.shape)}")
    nd = _nd_index(ctx, data.shape, indices.shape, batch)
    tuples = numel(indices.shape[:-1])
    return kernel("gather_nd_any", "GatherNDParams", tuples, float(elem * nd["slice_size"]),
                  data=ctx.in_buf(0), indices=ctx.in_buf(1), out=ctx.out_buf(0), elem_size=elem,
                  tuples_per_batch=numel(indices.shape[batch:-1]), batch_stride=numel(data.shape[batch:]),
                  index_type="hexfuse::DType::kI64", **nd)


@rule("ScatterND")
def lower_scatter_nd(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(indices, ("int64",))
    ctx.require_dtype(updates, (data.dtype,))
    rank_of(ctx, data.shape)
    reductions = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}
    reduction = ctx.attr("reduction", "none")
    if reduction not in reductions:
        raise ctx.fail(f"reduction={reduction!r} is not supported")
    if reduction != "none" and data.dtype != "float32":
        raise ctx.fail(f"reduction={reduction!r} is supported for float32 only")
    nd = _nd_index(ctx, data.shape, indices.shape, 0)
    tuples = numel(indices.shape[:-1])
    if tuple(updates.shape) != tuple(indices.shape[:-1]) + tuple(data.shape[nd["k"]:]):
        raise ctx.fail(f"updates shape {list(updates.shape)} does not match indices and data")
    return kernel("scatter_nd_any", "ScatterNDParams", 1, float(elem * (numel(data.shape) + numel(updates.shape))),
                  max_tiles=1, data=ctx.in_buf(0), indices=ctx.in_buf(1), updates=ctx.in_buf(2),
                  out=ctx.out_buf(0), elem_size=elem, data_size=numel(data.shape), tuples=tuples,
                  index_type="hexfuse::DType::kI64", reduction=reductions[reduction], **nd)


@rule("DepthToSpace", "SpaceToDepth")
def lower_depth_space(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x, out = ctx.input(0), ctx.output(0)
    if len(x.shape) != 4:
        raise ctx.fail("input must be 4-D (NCHW)")
    b = int(ctx.attr("blocksize"))
    N, C, H, W = x.shape
    if ctx.node.op_type == "DepthToSpace":
        if C % (b * b):
            raise ctx.fail(f"{C} channels do not divide by blocksize^2 = {b * b}")
        c = C // (b * b)
        if ctx.attr("mode", "DCR") == "DCR":
            view, perm = [N, b, b, c, H, W], [0, 3, 4, 1, 5, 2]
        elif ctx.attr("mode") == "CRD":
            view, perm = [N, c, b, b, H, W], [0, 1, 4, 2, 5, 3]
        else:
            raise ctx.fail(f"mode={ctx.attr('mode')!r} is not supported")
    else:
        if H % b or W % b:
            raise ctx.fail(f"spatial dims {H}x{W} do not divide by blocksize {b}")
        view, perm = [N, C, H // b, b, W // b, b], [0, 3, 5, 1, 2, 4]
    own = strides_of(view)
    out_view = [view[p] for p in perm]
    if numel(out_view) != numel(out.shape):
        raise ctx.fail(f"output shape {list(out.shape)} does not match")
    return kernel("strided_copy", "StridedCopyParams", numel(out_view), float(elem),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "elem_size": elem, "rank": 6,
                     "out_dims": dims(out_view), "in_strides": dims([own[p] for p in perm])})


@rule("ArgMax", "ArgMin")
def lower_arg(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, outputs=())
    ctx.require_dtype(ctx.output(0), ("int64",))
    x = ctx.input(0)
    shape = list(x.shape) or [1]
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(shape))
    inner = numel(shape[axis + 1:])
    return kernel("arg_f32", "ArgParams", numel(shape[:axis]) * inner, 2.0 * shape[axis],
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "len": shape[axis], "inner": inner,
                     "max": ctx.node.op_type == "ArgMax", "last": int(ctx.attr("select_last_index", 0))})


@rule("CumSum")
def lower_cumsum(ctx: NodeContext) -> Kernel:
    x, out = ctx.input(0), ctx.output(0)
    ctx.require_dtype(x, ("float32", "int32", "int64"))
    ctx.require_dtype(out, (x.dtype,))
    if numel(ctx.input(1).shape) != 1:
        raise ctx.fail("axis must be a scalar")
    rank = rank_of(ctx, x.shape)
    return kernel("cumsum_any", "CumSumParams", 1, 2.0 * numel(x.shape), max_tiles=1,
                  **{"in": ctx.in_buf(0), "axis": ctx.in_buf(1), "out": ctx.out_buf(0),
                     "type": f"hexfuse::DType::{CPP_DTYPE[x.dtype]}", "axis_type": _index_type(ctx, 1),
                     "rank": rank, "dims": dims(x.shape), "exclusive": int(ctx.attr("exclusive", 0)),
                     "reverse": int(ctx.attr("reverse", 0))})

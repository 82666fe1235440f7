"""DMA rules: views and copies, Transpose/Expand as strided copies, Concat, Split, Slice, Gather; and the
index ops TopK and ScatterElements. Element size comes from the dtype, so these serve every dtype."""

from __future__ import annotations

from hexfuse.op_package.lower.context import (CPP_DTYPE, ELEMENT_SIZE, INDEX_DTYPES, MAX_PARTS, Kernel, NodeContext,
                                      broadcast_strides, dims, kernel, numel, rank_of, rule, strides_of)


def _elem(ctx: NodeContext) -> int:
    data = ctx.output(0)
    ctx.require_dtype(data, tuple(ELEMENT_SIZE))
    return ELEMENT_SIZE[data.dtype]


@rule("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")
def lower_copy(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    if ctx.input(0).dtype != ctx.output(0).dtype:
        raise ctx.fail("input and output dtypes differ")
    return kernel("copy_any", "CopyParams", numel(ctx.output(0).shape), float(elem),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "elem_size": elem})


@rule("Transpose", "Expand")
def lower_strided(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x, out = ctx.input(0), ctx.output(0)
    out_shape = list(out.shape) or [1]
    rank = rank_of(ctx, out_shape)
    if ctx.node.op_type == "Transpose":
        perm = list(ctx.attr("perm", tuple(range(len(x.shape) - 1, -1, -1))))
        own = strides_of(x.shape)
        in_strides = [own[p] for p in perm] or [1]
    else:
        in_strides = broadcast_strides(x.shape, out_shape)
    return kernel("strided_copy", "StridedCopyParams", numel(out_shape), float(elem),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "elem_size": elem, "rank": rank,
                     "out_dims": dims(out_shape), "in_strides": dims(in_strides)})


def _parts(ctx: NodeContext, names: list[str], axis: int, shape_of) -> tuple[list[int], list[int]]:
    if len(names) > MAX_PARTS:
        raise ctx.fail(f"{len(names)} parts, at most {MAX_PARTS} are supported")
    bufs = [ctx.buf(n) for n in names]
    rows = [numel(shape_of(n)[axis:]) for n in names]
    return bufs + [0] * (MAX_PARTS - len(bufs)), rows + [0] * (MAX_PARTS - len(rows))


@rule("Concat")
def lower_concat(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    out = ctx.output(0)
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(out.shape))
    names = [n for n in ctx.node.inputs if n and numel(ctx.tensor(n).shape) > 0]
    parts, rows = _parts(ctx, names, axis, lambda n: ctx.tensor(n).shape)
    return kernel("concat_any", "ConcatParams", numel(out.shape[:axis]), float(elem * numel(out.shape[axis:])),
                  out=ctx.out_buf(0), elem_size=elem, out_row=numel(out.shape[axis:]), count=len(names),
                  parts=parts, part_row=rows)


@rule("Split")
def lower_split(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x = ctx.input(0)
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(x.shape))
    names = [n for n in ctx.node.outputs if n]
    if len(names) != len(ctx.node.outputs):
        raise ctx.fail("omitted outputs are not supported")
    parts, rows = _parts(ctx, names, axis, lambda n: ctx.tensor(n).shape)
    return kernel("split_any", "SplitParams", numel(x.shape[:axis]), float(elem * numel(x.shape[axis:])),
                  **{"in": ctx.in_buf(0), "elem_size": elem, "in_row": numel(x.shape[axis:]), "count": len(names),
                     "parts": parts, "part_row": rows})


@rule("Slice")
def lower_slice(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    x, out = ctx.input(0), ctx.output(0)
    rank = rank_of(ctx, x.shape)
    fields: dict[str, object] = {"in": ctx.in_buf(0), "out": ctx.out_buf(0), "elem_size": elem, "rank": rank,
                                 "in_dims": dims(x.shape), "out_dims": dims(out.shape)}
    if "starts" in ctx.node.attributes:  # opset < 10: static attributes
        start, step = [0] * rank, [1] * rank
        axes = list(ctx.attr("axes", tuple(range(len(ctx.attr("starts"))))))
        for a, s in zip(axes, ctx.attr("starts")):
            a = ctx.axis(int(a), rank)
            s = int(s) + x.shape[a] if int(s) < 0 else int(s)
            start[a] = min(max(s, 0), x.shape[a])
        fields.update(static_start=dims(start), static_step=dims(step))
    else:
        index = ctx.input(1)
        ctx.require_dtype(index, INDEX_DTYPES)
        for i in (2, 3, 4):
            if ctx.has_input(i):
                ctx.require_dtype(ctx.input(i), (index.dtype,))
        fields.update(starts=ctx.in_buf(1), ends=ctx.in_buf(2), axes=ctx.in_buf(3), steps=ctx.in_buf(4),
                      index_type=f"hexfuse::DType::{CPP_DTYPE[index.dtype]}", count=numel(index.shape))
    return kernel("slice_any", "SliceParams", numel(out.shape), float(elem * 4), **fields)


@rule("Gather")
def lower_gather(ctx: NodeContext) -> Kernel:
    elem = _elem(ctx)
    data, indices = ctx.input(0), ctx.input(1)
    ctx.require_dtype(indices, INDEX_DTYPES)
    axis = ctx.axis(int(ctx.attr("axis", 0)), len(data.shape))
    return kernel("gather_any", "GatherParams", numel(ctx.output(0).shape), float(elem * 4),
                  data=ctx.in_buf(0), indices=ctx.in_buf(1), out=ctx.out_buf(0), elem_size=elem,
                  outer=numel(data.shape[:axis]), axis_len=data.shape[axis], inner=numel(data.shape[axis + 1:]),
                  num_indices=numel(indices.shape), index_type=f"hexfuse::DType::{CPP_DTYPE[indices.dtype]}")


@rule("TopK")
def lower_topk(ctx: NodeContext) -> Kernel:
    ctx.require_float(0)
    x, values = ctx.input(0), ctx.output(0)
    if ctx.has_output(1):
        ctx.require_dtype(ctx.output(1), ("int64",))
    axis = ctx.axis(int(ctx.attr("axis", -1)), len(x.shape))
    inner = numel(x.shape[axis + 1:])
    return kernel("topk_f32", "TopKParams", numel(x.shape[:axis]) * inner, 4.0 * x.shape[axis],
                  x=ctx.in_buf(0), values=ctx.out_buf(0), indices=ctx.out_buf(1), len=x.shape[axis], inner=inner,
                  k=values.shape[axis], largest=int(ctx.attr("largest", 1)))


@rule("ScatterElements")
def lower_scatter(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, 2)
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    ctx.require_dtype(indices, INDEX_DTYPES)
    reductions = {"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}
    reduction = ctx.attr("reduction", "none")
    if reduction not in reductions:
        raise ctx.fail(f"reduction={reduction!r} is not supported")
    rank = rank_of(ctx, data.shape)
    return kernel("scatter_elements_f32", "ScatterParams", 1, float(4 * (numel(data.shape) + numel(updates.shape))),
                  max_tiles=1, data=ctx.in_buf(0), indices=ctx.in_buf(1), updates=ctx.in_buf(2), out=ctx.out_buf(0),
                  rank=rank, axis=ctx.axis(int(ctx.attr("axis", 0)), rank), data_dims=dims(data.shape),
                  upd_dims=dims(updates.shape), index_type=f"hexfuse::DType::{CPP_DTYPE[indices.dtype]}",
                  reduction=reductions[reduction])


@rule("Cast", "CastLike")
def lower_cast(ctx: NodeContext) -> Kernel:
    if ctx.node.op_type == "CastLike":
        ctx.require_dtype(ctx.input(1), (ctx.output(0).dtype,))
    if int(ctx.attr("saturate", 1)) != 1:
        raise ctx.fail("saturate=0 is not supported")
    x, y = ctx.input(0), ctx.output(0)
    ctx.require_dtype(x, tuple(CPP_DTYPE))
    ctx.require_dtype(y, tuple(CPP_DTYPE))
    return kernel("cast_any", "CastParams", numel(y.shape), 2.0,
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "from": f"hexfuse::DType::{CPP_DTYPE[x.dtype]}",
                     "to": f"hexfuse::DType::{CPP_DTYPE[y.dtype]}"})

"""Vector rules with a reduction inside: BatchNormalization, LRN, LayerNorm/RMSNorm, Softmax, Reduce*, pools."""

from __future__ import annotations

from hexfuse.op_package.lower.context import Kernel, NodeContext, dims, kernel, numel, rank_of, rule
from hexfuse.op_package.lower.linalg import spatial, window

REDUCE = {"ReduceSum": "kSum", "ReduceMean": "kMean", "ReduceMax": "kMax", "ReduceMin": "kMin",
          "ReduceProd": "kProd", "ReduceSumSquare": "kSumSquare", "ReduceL1": "kL1", "ReduceL2": "kL2",
          "ReduceLogSum": "kLogSum", "ReduceLogSumExp": "kLogSumExp"}


@rule("BatchNormalization")
def lower_batchnorm(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, 1, 2, 3, 4)
    if any(ctx.has_output(i) for i in (1, 2)) or int(ctx.attr("training_mode", 0)):
        raise ctx.fail("training mode (running statistics outputs) is not supported")
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.fail("input must have a channel dimension")
    inner = numel(x.shape[2:])
    return kernel("batchnorm_f32", "BatchNormParams", x.shape[0] * x.shape[1], 2.0 * inner,
                  x=ctx.in_buf(0), scale=ctx.in_buf(1), bias=ctx.in_buf(2), mean=ctx.in_buf(3),
                  var=ctx.in_buf(4), out=ctx.out_buf(0), C=x.shape[1], inner=inner,
                  epsilon=float(ctx.attr("epsilon", 1e-5)))


@rule("LRN")
def lower_lrn(ctx: NodeContext) -> Kernel:
    ctx.require_float(0)
    x = ctx.input(0)
    size = int(ctx.attr("size", 1))
    inner = numel(x.shape[2:])
    return kernel("lrn_f32", "LrnParams", x.shape[0] * x.shape[1], 3.0 * size * inner,
                  x=ctx.in_buf(0), out=ctx.out_buf(0), C=x.shape[1], inner=inner, size=size,
                  alpha=float(ctx.attr("alpha", 1e-4)), beta=float(ctx.attr("beta", 0.75)),
                  bias=float(ctx.attr("bias", 1.0)))


@rule("LayerNormalization", "RMSNormalization")
def lower_layernorm(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, 1, 2)
    if ctx.has_output(1) or ctx.has_output(2):
        raise ctx.fail("the Mean / InvStdDev outputs are not supported")
    x = ctx.input(0)
    axis = ctx.axis(int(ctx.attr("axis", -1)), len(x.shape))
    cols = numel(x.shape[axis:])
    sizes = {}
    for i, key in ((1, "scale_size"), (2, "bias_size")):
        if ctx.has_input(i):
            shape = tuple(ctx.input(i).shape)
            trailing = shape[next((k for k, d in enumerate(shape) if d != 1), len(shape)):]  # leading 1s broadcast
            # the kernel indexes it by column modulo its size: it must be the normalised shape's tail
            if len(shape) > len(x.shape) - axis or (trailing and trailing != tuple(x.shape[len(x.shape) - len(trailing):])):
                raise ctx.fail(f"{key[:-5]} of shape {shape} does not broadcast over the normalised axes")
            sizes[key] = numel(trailing)
    return kernel("layernorm_f32", "LayerNormParams", numel(x.shape[:axis]), 6.0 * cols,
                  x=ctx.in_buf(0), scale=ctx.in_buf(1), bias=ctx.in_buf(2), out=ctx.out_buf(0), cols=cols,
                  scale_size=sizes.get("scale_size", 1), bias_size=sizes.get("bias_size", 1),
                  epsilon=float(ctx.attr("epsilon", 1e-5)), rms=ctx.node.op_type == "RMSNormalization")


@rule("Softmax", "LogSoftmax")
def lower_softmax(ctx: NodeContext) -> Kernel:
    # Opset >= 13 semantics (one axis): the pass upgrades models to opset 13+ before fusing.
    ctx.require_float(0)
    x = ctx.input(0)
    rank = rank_of(ctx, x.shape)
    axis = ctx.axis(int(ctx.attr("axis", -1)), rank)
    shape = list(x.shape) or [1]
    inner = numel(shape[axis + 1:])
    return kernel("softmax_f32", "SoftmaxParams", numel(shape[:axis]) * inner, 12.0 * shape[axis],
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "len": shape[axis], "inner": inner,
                     "log": ctx.node.op_type == "LogSoftmax"})


@rule(*REDUCE)
def lower_reduce(ctx: NodeContext) -> Kernel:
    ctx.require_float(0)
    x, out = ctx.input(0), ctx.output(0)
    rank = rank_of(ctx, x.shape)
    noop = int(ctx.attr("noop_with_empty_axes", 0))
    axes_buf, axes_count, mask = -1, 0, 0
    if "axes" in ctx.node.attributes:  # opset < 18 form
        for a in ctx.attr("axes"):
            mask |= 1 << ctx.axis(int(a), rank)
    elif ctx.has_input(1):
        axes = ctx.input(1)
        ctx.require_dtype(axes, ("int64",))
        axes_buf, axes_count = ctx.in_buf(1), numel(axes.shape)
    elif not noop:
        mask = (1 << rank) - 1
    return kernel("reduce_f32", "ReduceParams", numel(out.shape), 2.0 * numel(x.shape) / max(1, numel(out.shape)),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "op": f"hexfuse::ReduceOp::{REDUCE[ctx.node.op_type]}",
                     "rank": rank, "in_dims": dims(x.shape), "axes_buf": axes_buf, "axes_count": axes_count,
                     "static_mask": mask, "noop_with_empty_axes": noop})


@rule("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool")
def lower_pool(ctx: NodeContext) -> Kernel:
    ctx.require_float(0)
    op_type = ctx.node.op_type
    if ctx.has_output(1):
        raise ctx.fail("the Indices output of MaxPool is not supported")
    ctx.refuse_attrs(storage_order=lambda v: int(v) != 0)
    x, out = ctx.input(0), ctx.output(0)
    in_hw, out_hw = spatial(ctx, x.shape), spatial(ctx, out.shape)
    if op_type.startswith("Global"):
        k_hw = in_hw
        win = {"stride_h": 1, "stride_w": 1, "dil_h": 1, "dil_w": 1, "pad_t": 0, "pad_l": 0, "pad_b": 0, "pad_r": 0}
    else:
        k_hw = [1] * (4 - len(x.shape)) + list(ctx.attr("kernel_shape"))
        win = window(ctx, in_hw, out_hw, k_hw, len(x.shape) - 2)
    kind = "kMax" if "Max" in op_type else ("kLp" if "Lp" in op_type else "kAverage")
    extra = {}
    if kind == "kLp":
        p_norm = int(ctx.attr("p", 2))
        if p_norm < 1:
            raise ctx.fail(f"p={p_norm} is not supported")
        extra["p_norm"] = float(p_norm)
        if op_type == "LpPool" and int(ctx.attr("ceil_mode", 0)):
            raise ctx.fail("ceil_mode=1 is not supported")
    return kernel("pool_f32", "PoolParams", x.shape[0] * x.shape[1], float(out_hw[0] * out_hw[1] * k_hw[0] * k_hw[1]),
                  x=ctx.in_buf(0), out=ctx.out_buf(0), kind=f"hexfuse::PoolKind::{kind}", H=in_hw[0], W=in_hw[1],
                  OH=out_hw[0], OW=out_hw[1], KH=k_hw[0], KW=k_hw[1], count_include_pad=int(ctx.attr("count_include_pad", 0)),
                  **win, **extra)


@rule("InstanceNormalization", "GroupNormalization")
def lower_groupnorm(ctx: NodeContext) -> Kernel:
    ctx.require_float(0, 1, 2)
    x = ctx.input(0)
    if len(x.shape) < 2:
        raise ctx.fail("input must have a channel dimension")
    N, C = x.shape[:2]
    groups = C if ctx.node.op_type == "InstanceNormalization" else int(ctx.attr("num_groups"))
    if groups <= 0 or C % groups:
        raise ctx.fail(f"{C} channels do not split into {groups} groups")
    sizes = {numel(ctx.input(i).shape) for i in (1, 2)}
    if sizes == {C}:
        per_channel = 1
    elif sizes == {groups}:
        per_channel = 0
    else:
        raise ctx.fail(f"scale/bias of {sorted(sizes)} values match neither {C} channels nor {groups} groups")
    inner = numel(x.shape[2:])
    return kernel("groupnorm_f32", "GroupNormParams", N * groups, 6.0 * inner * C / groups,
                  x=ctx.in_buf(0), scale=ctx.in_buf(1), bias=ctx.in_buf(2), out=ctx.out_buf(0), C=C, groups=groups,
                  inner=inner, per_channel=per_channel, epsilon=float(ctx.attr("epsilon", 1e-5)))


@rule("MeanVarianceNormalization")
def lower_mvn(ctx: NodeContext) -> Kernel:
    ctx.require_float(0)
    x = ctx.input(0)
    rank = rank_of(ctx, x.shape)
    mask = 0
    for a in ctx.attr("axes", (0, 2, 3)):
        mask |= 1 << ctx.axis(int(a), rank)
    kept = numel([d for i, d in enumerate(x.shape) if not (mask >> i) & 1])
    return kernel("mvn_f32", "MvnParams", kept, 6.0 * numel(x.shape) / max(1, kept),
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "rank": rank, "dims": dims(x.shape), "mask": mask})


@rule("Hardmax", "LpNormalization")
def lower_line(ctx: NodeContext) -> Kernel:
    ctx.require_float(0)
    x = ctx.input(0)
    shape = list(x.shape) or [1]
    axis = ctx.axis(int(ctx.attr("axis", -1)), len(shape))
    op = "kHardmax"
    if ctx.node.op_type == "LpNormalization":
        p_norm = int(ctx.attr("p", 2))
        if p_norm not in (1, 2):
            raise ctx.fail(f"p={p_norm} is not supported (1 or 2)")
        op = f"kL{p_norm}"
    inner = numel(shape[axis + 1:])
    return kernel("line_f32", "LineParams", numel(shape[:axis]) * inner, 4.0 * shape[axis],
                  **{"in": ctx.in_buf(0), "out": ctx.out_buf(0), "len": shape[axis], "inner": inner,
                     "op": f"hexfuse::LineOp::{op}"})



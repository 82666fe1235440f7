// reduce.h: ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp over any axes. Work unit: one output element.
// The output layout is the same with or without keepdims, so only the reduced-axis mask matters; it is
// static (axes attribute) or read at run time from the int64 axes input.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

enum class ReduceOp : int32_t { kSum = 0, kMean, kMax, kMin, kProd, kSumSquare, kL1, kL2, kLogSum, kLogSumExp };

struct ReduceParams {
    int32_t in = -1, out = -1;
    ReduceOp op = ReduceOp::kSum;
    int32_t rank = 1;
    Dims in_dims{};
    int32_t axes_buf = -1;           // int64 axes input, or -1
    int64_t axes_count = 0;          // its length
    int64_t static_mask = 0;         // bit d set: axis d reduced (used when axes_buf < 0)
    int32_t noop_with_empty_axes = 0;
};

void reduce_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

// reduce.cpp: walks the reduced sub-space of each output element with an odometer; sums in double.
#include "hexfuse/kernels/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hexfuse {
namespace {

int64_t axes_mask(const ReduceParams& p, void* const* buffers) {
    if (p.axes_buf < 0) return p.static_mask;
    const auto* axes = static_cast<const int64_t*>(buffers[p.axes_buf]);
    int64_t mask = 0;
    for (int64_t i = 0; i < p.axes_count; ++i) {
        const int64_t a = axes[i] < 0 ? axes[i] + p.rank : axes[i];
        mask |= int64_t{1} << a;
    }
    if (p.axes_count == 0 && !p.noop_with_empty_axes) mask = (int64_t{1} << p.rank) - 1;
    return mask;
}

}  // namespace

void reduce_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ReduceParams*>(params);
    const float* in = cf32(buffers, p.in);
    float* out = f32(buffers, p.out);
    const int64_t mask = axes_mask(p, buffers);
    Dims strides{}, kept{}, red{};
    int64_t s = 1, count = 1;
    for (int d = p.rank - 1; d >= 0; --d) {
        strides[d] = s;
        s *= p.in_dims[d];
        const bool reduced = (mask >> d) & 1;
        kept[d] = reduced ? 1 : p.in_dims[d];
        red[d] = reduced ? p.in_dims[d] : 1;
        if (reduced) count *= p.in_dims[d];
    }
    Dims oc{}, rc{};
    for (int64_t o = begin; o < end; ++o) {
        unravel(o, kept, p.rank, &oc);
        const int64_t base = dot(oc, strides, p.rank);
        double shift = 0.0;  // LogSumExp: the maximum, so exp never overflows
        if (p.op == ReduceOp::kLogSumExp) {
            shift = -std::numeric_limits<double>::infinity();
            for (int64_t r = 0; r < count; ++r) {
                unravel(r, red, p.rank, &rc);
                shift = std::max(shift, static_cast<double>(in[base + dot(rc, strides, p.rank)]));
            }
            if (!std::isfinite(shift)) shift = 0.0;
        }
        double acc = p.op == ReduceOp::kProd ? 1.0 : 0.0;
        if (p.op == ReduceOp::kMax) acc = -std::numeric_limits<double>::infinity();
        if (p.op == ReduceOp::kMin) acc = std::numeric_limits<double>::infinity();
        for (int64_t r = 0; r < count; ++r) {
            unravel(r, red, p.rank, &rc);
            const double v = in[base + dot(rc, strides, p.rank)];
            switch (p.op) {
                case ReduceOp::kSum: case ReduceOp::kMean: case ReduceOp::kLogSum: acc += v; break;
                case ReduceOp::kLogSumExp: acc += std::exp(v - shift); break;
                case ReduceOp::kMax: acc = nan_max(acc, v); break;
                case ReduceOp::kMin: acc = nan_min(acc, v); break;
                case ReduceOp::kProd: acc *= v; break;
                case ReduceOp::kSumSquare: case ReduceOp::kL2: acc += float_range(v * v); break;
                case ReduceOp::kL1: acc += std::fabs(v); break;
            }
        }
        if (p.op == ReduceOp::kMean) acc /= static_cast<double>(count);
        if (p.op == ReduceOp::kL2) acc = std::sqrt(float_range(acc));
        if (p.op == ReduceOp::kLogSum) acc = std::log(acc);
        if (p.op == ReduceOp::kLogSumExp) acc = shift + std::log(acc);
        out[o] = static_cast<float>(acc);
    }
}

}  // namespace hexfuse

// elementwise.cpp: scalar reference paths (the compiler vectorises the contiguous loops on the host).
// Hexagon builds (__HVX__) run Relu, Clip and contiguous Max / Min through hvx_minmax.h first.
#include "hexfuse/kernels/elementwise.h"

#include <algorithm>
#include <cmath>

#ifdef __HVX__
#include "hexfuse/kernels/hvx_minmax.h"
#endif

namespace hexfuse {
namespace {

inline float apply(UnaryOp op, float x, float alpha, float beta) {
    switch (op) {
        case UnaryOp::kRelu: return x > 0.f || x != x ? x : 0.f;  // NaN stays NaN
        case UnaryOp::kSigmoid: return 1.f / (1.f + std::exp(-x));
        case UnaryOp::kTanh: return std::tanh(x);
        case UnaryOp::kErf: return std::erf(x);
        case UnaryOp::kGelu: return 0.5f * x * (1.f + std::erf(x * 0.70710678118654752f));
        case UnaryOp::kGeluTanh:
            return 0.5f * x * (1.f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        case UnaryOp::kClip: return std::min(std::max(x, alpha), beta);
        case UnaryOp::kLeakyRelu: return x >= 0.f ? x : alpha * x;
        case UnaryOp::kNeg: return -x;
        case UnaryOp::kAbs: return std::fabs(x);
        case UnaryOp::kExp: return std::exp(x);
        case UnaryOp::kLog: return std::log(x);
        case UnaryOp::kSqrt: return std::sqrt(x);
        case UnaryOp::kReciprocal: return 1.f / x;
        case UnaryOp::kSin: return std::sin(x);
        case UnaryOp::kCos: return std::cos(x);
        case UnaryOp::kSoftplus: return x > 20.f ? x : std::log1p(std::exp(x));
        case UnaryOp::kElu: return x >= 0.f ? x : alpha * (std::exp(x) - 1.f);
        case UnaryOp::kHardSigmoid: return nan_min(1.f, nan_max(0.f, alpha * x + beta));
        case UnaryOp::kHardSwish: return x * std::min(1.f, std::max(0.f, x / 6.f + 0.5f));
        case UnaryOp::kFloor: return std::floor(x);
        case UnaryOp::kCeil: return std::ceil(x);
        case UnaryOp::kIdentity: return x;
        case UnaryOp::kSign: return x > 0.f ? 1.f : (x < 0.f ? -1.f : x);  // keeps 0 and NaN
        case UnaryOp::kRound: return std::nearbyint(x);  // default rounding mode: half to even
        case UnaryOp::kTan: return std::tan(x);
        case UnaryOp::kSinh: return std::sinh(x);
        case UnaryOp::kCosh: return std::cosh(x);
        case UnaryOp::kAsin: return std::asin(x);
        case UnaryOp::kAcos: return std::acos(x);
        case UnaryOp::kAtan: return std::atan(x);
        case UnaryOp::kAsinh: return std::asinh(x);
        case UnaryOp::kAcosh: return std::acosh(x);
        case UnaryOp::kAtanh: return std::atanh(x);
        case UnaryOp::kSelu: return x > 0.f ? beta * x : beta * (alpha * std::exp(x) - alpha);
        case UnaryOp::kCelu: return nan_max(0.f, x) + nan_min(0.f, alpha * std::expm1(x / alpha));
        case UnaryOp::kMish: return x * std::tanh(x > 20.f ? x : std::log1p(std::exp(x)));
        case UnaryOp::kSoftsign: return x / (1.f + std::fabs(x));
        case UnaryOp::kThresholdedRelu: return x > alpha ? x : 0.f;
        case UnaryOp::kShrink: return x < -alpha ? x + beta : (x > alpha ? x - beta : 0.f);
    }
    return x;
}

inline float combine(BinaryOp op, float a, float b) {
    switch (op) {
        case BinaryOp::kAdd: return a + b;
        case BinaryOp::kSub: return a - b;
        case BinaryOp::kMul: return a * b;
        case BinaryOp::kDiv: return a / b;
        case BinaryOp::kPow: return b == 2.f ? a * a : std::pow(a, b);
        case BinaryOp::kMax: return nan_max(a, b);
        case BinaryOp::kMin: return nan_min(a, b);
        case BinaryOp::kPRelu: return a < 0.f ? a * b : a;
        case BinaryOp::kFmod: return std::fmod(a, b);
    }
    return a;
}

// Elements [0, done) of one contiguous run done by the HVX path (Max / Min only); the scalar loop
// finishes [done, run). b_step 0: b[0] is broadcast.
template <BinaryOp Op>
int64_t vector_prefix(float* out, const float* a, const float* b, int64_t b_step, int64_t run) {
#ifdef __HVX__
    if constexpr (Op == BinaryOp::kMax || Op == BinaryOp::kMin) {
        return static_cast<int64_t>(hexfuse_hvx_minmax_f32(out, a, b, static_cast<size_t>(b_step),
                                                           static_cast<size_t>(run),
                                                           Op == BinaryOp::kMax ? HEXFUSE_HVX_MAX : HEXFUSE_HVX_MIN));
    }
#endif
    (void)out, (void)a, (void)b, (void)b_step, (void)run;
    return 0;
}

template <BinaryOp Op>
void binary_rows(const BinaryParams& p, const float* a, const float* b, float* out, int64_t begin, int64_t end) {
    const int last = p.rank - 1;
    const int64_t as = p.a_strides[last], bs = p.b_strides[last];
    Dims coords{};
    for (int64_t i = begin; i < end;) {
        unravel(i, p.out_dims, p.rank, &coords);
        const int64_t run = std::min(end - i, p.out_dims[last] - coords[last]);
        const float* ap = a + dot(coords, p.a_strides, p.rank);
        const float* bp = b + dot(coords, p.b_strides, p.rank);
        float* op = out + i;
        if (as == 1 && bs == 1) {
            for (int64_t j = vector_prefix<Op>(op, ap, bp, 1, run); j < run; ++j) op[j] = combine(Op, ap[j], bp[j]);
        } else if (as == 1 && bs == 0) {
            const float bv = *bp;
            for (int64_t j = vector_prefix<Op>(op, ap, bp, 0, run); j < run; ++j) op[j] = combine(Op, ap[j], bv);
        } else {
            for (int64_t j = 0; j < run; ++j) op[j] = combine(Op, ap[j * as], bp[j * bs]);
        }
        i += run;
    }
}

}  // namespace

void unary_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const UnaryParams*>(params);
    const float* in = cf32(buffers, p.in);
    float* out = f32(buffers, p.out);
    float alpha = p.alpha, beta = p.beta;
    if (p.min_buf >= 0) alpha = *cf32(buffers, p.min_buf);
    if (p.max_buf >= 0) beta = *cf32(buffers, p.max_buf);
#ifdef __HVX__
    const size_t n = static_cast<size_t>(end - begin);
    if (p.op == UnaryOp::kRelu) begin += static_cast<int64_t>(hexfuse_hvx_relu_f32(out + begin, in + begin, n));
    if (p.op == UnaryOp::kClip) begin += static_cast<int64_t>(hexfuse_hvx_clip_f32(out + begin, in + begin, n, alpha, beta));
#endif
    if (p.op == UnaryOp::kRelu) {  // the hot one: keep it a plain loop the vectoriser sees
        for (int64_t i = begin; i < end; ++i) out[i] = in[i] > 0.f || in[i] != in[i] ? in[i] : 0.f;
        return;
    }
    for (int64_t i = begin; i < end; ++i) out[i] = apply(p.op, in[i], alpha, beta);
}

void binary_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const BinaryParams*>(params);
    const float* a = cf32(buffers, p.a);
    const float* b = cf32(buffers, p.b);
    float* out = f32(buffers, p.out);
    switch (p.op) {
        case BinaryOp::kAdd: binary_rows<BinaryOp::kAdd>(p, a, b, out, begin, end); break;
        case BinaryOp::kSub: binary_rows<BinaryOp::kSub>(p, a, b, out, begin, end); break;
        case BinaryOp::kMul: binary_rows<BinaryOp::kMul>(p, a, b, out, begin, end); break;
        case BinaryOp::kDiv: binary_rows<BinaryOp::kDiv>(p, a, b, out, begin, end); break;
        case BinaryOp::kPow: binary_rows<BinaryOp::kPow>(p, a, b, out, begin, end); break;
        case BinaryOp::kMax: binary_rows<BinaryOp::kMax>(p, a, b, out, begin, end); break;
        case BinaryOp::kMin: binary_rows<BinaryOp::kMin>(p, a, b, out, begin, end); break;
        case BinaryOp::kPRelu: binary_rows<BinaryOp::kPRelu>(p, a, b, out, begin, end); break;
        case BinaryOp::kFmod: binary_rows<BinaryOp::kFmod>(p, a, b, out, begin, end); break;
    }
}

void variadic_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const VariadicParams*>(params);
    float* out = f32(buffers, p.out);
    Dims c{};
    for (int64_t i = begin; i < end; ++i) {
        unravel(i, p.out_dims, p.rank, &c);
        float acc = cf32(buffers, p.parts[0])[dot(c, p.strides[0], p.rank)];
        for (int32_t k = 1; k < p.count; ++k) acc = combine(p.op, acc, cf32(buffers, p.parts[k])[dot(c, p.strides[k], p.rank)]);
        out[i] = p.mean ? acc / static_cast<float>(p.count) : acc;
    }
}

}  // namespace hexfuse

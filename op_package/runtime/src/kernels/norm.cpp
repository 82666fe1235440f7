// norm.cpp: statistics accumulate in double so results sit well inside float rounding of ONNX Runtime.
#include "hexfuse/kernels/norm.h"

#include <algorithm>
#include <cmath>

namespace hexfuse {

void batchnorm_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const BatchNormParams*>(params);
    const float* x = cf32(buffers, p.x);
    const float *scale = cf32(buffers, p.scale), *bias = cf32(buffers, p.bias);
    const float *mean = cf32(buffers, p.mean), *var = cf32(buffers, p.var);
    float* out = f32(buffers, p.out);
    for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t c = unit % p.C;
        const float a = scale[c] * (1.f / std::sqrt(var[c] + p.epsilon));  // ONNX Runtime's order
        const float b = bias[c] - mean[c] * a;
        const float* xp = x + unit * p.inner;
        float* op = out + unit * p.inner;
        for (int64_t i = 0; i < p.inner; ++i) op[i] = xp[i] * a + b;
    }
}

void lrn_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const LrnParams*>(params);
    const float* x = cf32(buffers, p.x);
    float* out = f32(buffers, p.out);
    const int64_t lo_off = (p.size - 1) / 2, hi_off = p.size - 1 - lo_off;
    for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t n = unit / p.C, c = unit % p.C;
        const int64_t c0 = std::max<int64_t>(0, c - lo_off), c1 = std::min(p.C - 1, c + hi_off);
        for (int64_t i = 0; i < p.inner; ++i) {
            double sq = 0.0;
            for (int64_t k = c0; k <= c1; ++k) {
                const double v = x[(n * p.C + k) * p.inner + i];
                sq += v * v;
            }
            const double denom = std::pow(p.bias + p.alpha / static_cast<double>(p.size) * sq, static_cast<double>(p.beta));
            out[unit * p.inner + i] = static_cast<float>(x[unit * p.inner + i] / denom);
        }
    }
}

void layernorm_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const LayerNormParams*>(params);
    const float* x = cf32(buffers, p.x);
    const float* scale = p.scale >= 0 ? cf32(buffers, p.scale) : nullptr;
    const float* bias = p.bias >= 0 ? cf32(buffers, p.bias) : nullptr;
    float* out = f32(buffers, p.out);
    for (int64_t row = begin; row < end; ++row) {
        const float* xr = x + row * p.cols;
        float* orow = out + row * p.cols;
        double mean = 0.0, sq = 0.0;
        for (int64_t i = 0; i < p.cols; ++i) mean += xr[i];
        mean = p.rms ? 0.0 : mean / static_cast<double>(p.cols);
        for (int64_t i = 0; i < p.cols; ++i) sq += float_range((xr[i] - mean) * (xr[i] - mean));
        const double inv = 1.0 / std::sqrt(float_range(sq) / static_cast<double>(p.cols) + p.epsilon);
        for (int64_t i = 0; i < p.cols; ++i) {
            double v = (xr[i] - mean) * inv;
            if (scale != nullptr) v *= scale[i % p.scale_size];
            if (bias != nullptr) v += bias[i % p.bias_size];
            orow[i] = static_cast<float>(v);
        }
    }
}

void softmax_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const SoftmaxParams*>(params);
    const float* in = cf32(buffers, p.in);
    float* out = f32(buffers, p.out);
    for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t base = (unit / p.inner) * p.len * p.inner + unit % p.inner;
        float mx = in[base];
        for (int64_t i = 1; i < p.len; ++i) mx = std::max(mx, in[base + i * p.inner]);
        double sum = 0.0;
        for (int64_t i = 0; i < p.len; ++i) sum += std::exp(static_cast<double>(in[base + i * p.inner]) - mx);
        for (int64_t i = 0; i < p.len; ++i) {
            const double v = static_cast<double>(in[base + i * p.inner]) - mx;
            out[base + i * p.inner] = static_cast<float>(p.log ? v - std::log(sum) : std::exp(v) / sum);
        }
    }
}

void groupnorm_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const GroupNormParams*>(params);
    const float* x = cf32(buffers, p.x);
    const float* scale = cf32(buffers, p.scale);
    const float* bias = cf32(buffers, p.bias);
    float* out = f32(buffers, p.out);
    const int64_t per_group = p.C / p.groups;
    const int64_t size = per_group * p.inner;
    for (int64_t u = begin; u < end; ++u) {
        const int64_t g = u % p.groups;
        const float* xp = x + u * size;
        float* op = out + u * size;
        double sum = 0.0;
        for (int64_t i = 0; i < size; ++i) sum += xp[i];
        const double mean = sum / static_cast<double>(size);
        double var = 0.0;
        for (int64_t i = 0; i < size; ++i) var += (xp[i] - mean) * (xp[i] - mean);
        var /= static_cast<double>(size);
        const double inv = 1.0 / std::sqrt(var + static_cast<double>(p.epsilon));
        for (int64_t c = 0; c < per_group; ++c) {
            const int64_t ch = p.per_channel ? g * per_group + c : g;
            const double a = inv * scale[ch], b = bias[ch];
            for (int64_t i = 0; i < p.inner; ++i) {
                const int64_t k = c * p.inner + i;
                op[k] = static_cast<float>((xp[k] - mean) * a + b);
            }
        }
    }
}

void mvn_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const MvnParams*>(params);
    const float* in = cf32(buffers, p.in);
    float* out = f32(buffers, p.out);
    Dims strides{}, kept{}, red{};
    int64_t s = 1, count = 1;
    for (int d = p.rank - 1; d >= 0; --d) {
        strides[d] = s;
        s *= p.dims[d];
        const bool reduced = (p.mask >> d) & 1;
        kept[d] = reduced ? 1 : p.dims[d];
        red[d] = reduced ? p.dims[d] : 1;
        if (reduced) count *= p.dims[d];
    }
    Dims oc{}, rc{};
    for (int64_t o = begin; o < end; ++o) {
        unravel(o, kept, p.rank, &oc);
        const int64_t base = dot(oc, strides, p.rank);
        double sum = 0.0, sq = 0.0;
        for (int64_t r = 0; r < count; ++r) {
            unravel(r, red, p.rank, &rc);
            const double v = in[base + dot(rc, strides, p.rank)];
            sum += v;
            sq += v * v;
        }
        const double mean = sum / static_cast<double>(count);
        const double var = std::max(0.0, sq / static_cast<double>(count) - mean * mean);
        const double denom = std::sqrt(var) + 1e-9;  // the ONNX function body: (X - mean) / (std + 1e-9)
        for (int64_t r = 0; r < count; ++r) {
            unravel(r, red, p.rank, &rc);
            const int64_t k = base + dot(rc, strides, p.rank);
            out[k] = static_cast<float>((in[k] - mean) / denom);
        }
    }
}

void line_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const LineParams*>(params);
    const float* in = cf32(buffers, p.in);
    float* out = f32(buffers, p.out);
    for (int64_t u = begin; u < end; ++u) {
        const int64_t base = (u / p.inner) * p.len * p.inner + u % p.inner;
        const float* xp = in + base;
        float* op = out + base;
        if (p.op == LineOp::kHardmax) {
            int64_t best = 0;
            for (int64_t j = 1; j < p.len; ++j) {
                if (xp[j * p.inner] > xp[best * p.inner]) best = j;
            }
            for (int64_t j = 0; j < p.len; ++j) op[j * p.inner] = j == best ? 1.f : 0.f;
            continue;
        }
        double norm = 0.0;
        for (int64_t j = 0; j < p.len; ++j) {
            const double v = xp[j * p.inner];
            norm += p.op == LineOp::kL1 ? std::fabs(v) : float_range(v * v);
        }
        if (p.op == LineOp::kL2) norm = std::sqrt(float_range(norm));
        for (int64_t j = 0; j < p.len; ++j) {
            op[j * p.inner] = norm != 0.0 ? static_cast<float>(xp[j * p.inner] / norm) : 0.f;
        }
    }
}

}  // namespace hexfuse

// conv.cpp: direct convolution accumulating whole output planes, so the inner loop runs along a
// contiguous output row (vectorisable) and the plane stays in cache. The reference path accumulates in
// double: long channel sums then agree with any float summation order to ~1e-7 relative.
#include "hexfuse/kernels/conv.h"

#include <algorithm>
#include <vector>

namespace hexfuse {
namespace {

// First ow whose input column ow*s - pad + k*d is >= 0, and one past the last one that is < W.
inline void valid_range(int64_t k, const ConvParams& p, int64_t* lo, int64_t* hi) {
    const int64_t shift = k * p.dil_w - p.pad_l;  // iw = ow * s + shift
    int64_t first = shift >= 0 ? 0 : (-shift + p.stride_w - 1) / p.stride_w;
    int64_t last = (p.W - 1 - shift) < 0 ? -1 : (p.W - 1 - shift) / p.stride_w;
    *lo = std::min(first, p.OW);
    *hi = std::max(*lo, std::min(last + 1, p.OW));
}

}  // namespace

void conv_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ConvParams*>(params);
    const float* x = cf32(buffers, p.x);
    const float* w = cf32(buffers, p.w);
    const float* bias = p.b >= 0 ? cf32(buffers, p.b) : nullptr;
    float* out = f32(buffers, p.out);
    const int64_t cg = p.C / p.group, mg = p.M / p.group, plane = p.OH * p.OW, in_plane = p.H * p.W;
    const bool pointwise = p.KH == 1 && p.KW == 1 && p.stride_h == 1 && p.stride_w == 1 &&
                           p.pad_t == 0 && p.pad_l == 0 && p.OH == p.H && p.OW == p.W;
    std::vector<double> acc(static_cast<size_t>(plane));
    for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t n = unit / p.M, m = unit % p.M, g = m / mg;
        double* o = acc.data();
        for (int64_t i = 0; i < plane; ++i) o[i] = 0.0;
        const float* wm = w + m * cg * p.KH * p.KW;
        for (int64_t ic = 0; ic < cg; ++ic) {
            const float* xc = x + (n * p.C + g * cg + ic) * in_plane;
            if (pointwise) {
                const double wv = wm[ic];
                for (int64_t i = 0; i < plane; ++i) o[i] += wv * xc[i];
                continue;
            }
            for (int64_t kh = 0; kh < p.KH; ++kh) {
                for (int64_t kw = 0; kw < p.KW; ++kw) {
                    const double wv = wm[(ic * p.KH + kh) * p.KW + kw];
                    int64_t lo = 0, hi = 0;
                    valid_range(kw, p, &lo, &hi);
                    const int64_t shift = kw * p.dil_w - p.pad_l;
                    for (int64_t oh = 0; oh < p.OH; ++oh) {
                        const int64_t ih = oh * p.stride_h - p.pad_t + kh * p.dil_h;
                        if (ih < 0 || ih >= p.H) continue;
                        const float* xr = xc + ih * p.W + shift;
                        double* orow = o + oh * p.OW;
                        if (p.stride_w == 1) {
                            for (int64_t ow = lo; ow < hi; ++ow) orow[ow] += wv * xr[ow];
                        } else {
                            for (int64_t ow = lo; ow < hi; ++ow) orow[ow] += wv * xr[ow * p.stride_w];
                        }
                    }
                }
            }
        }
        const float b0 = bias != nullptr ? bias[m] : 0.f;
        float* dst = out + unit * plane;
        for (int64_t i = 0; i < plane; ++i) dst[i] = static_cast<float>(o[i]) + b0;
    }
}

}  // namespace hexfuse

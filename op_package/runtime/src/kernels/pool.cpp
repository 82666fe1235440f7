// pool.cpp: windows are clipped to the input; the average divisor follows ONNX count_include_pad
// (padding counts, the ceil_mode overhang past the padding does not).
#include "hexfuse/kernels/pool.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hexfuse {

void pool_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const PoolParams*>(params);
    const float* x = cf32(buffers, p.x);
    float* out = f32(buffers, p.out);
    for (int64_t unit = begin; unit < end; ++unit) {
        const float* xp = x + unit * p.H * p.W;
        float* op = out + unit * p.OH * p.OW;
        for (int64_t oh = 0; oh < p.OH; ++oh) {
            const int64_t h0 = oh * p.stride_h - p.pad_t;
            for (int64_t ow = 0; ow < p.OW; ++ow) {
                const int64_t w0 = ow * p.stride_w - p.pad_l;
                float best = -std::numeric_limits<float>::infinity();
                float sum = 0.f;
                int64_t count = 0;
                for (int64_t kh = 0; kh < p.KH; ++kh) {
                    const int64_t ih = h0 + kh * p.dil_h;
                    if (ih < 0 || ih >= p.H) continue;
                    for (int64_t kw = 0; kw < p.KW; ++kw) {
                        const int64_t iw = w0 + kw * p.dil_w;
                        if (iw < 0 || iw >= p.W) continue;
                        const float v = xp[ih * p.W + iw];
                        best = std::max(best, v);
                        if (p.kind == PoolKind::kLp) {
                            sum += p.p_norm == 2.f ? v * v : std::pow(std::fabs(v), p.p_norm);
                        } else {
                            sum += v;
                        }
                        ++count;
                    }
                }
                if (p.kind == PoolKind::kMax) {
                    op[oh * p.OW + ow] = best;
                } else if (p.kind == PoolKind::kLp) {
                    op[oh * p.OW + ow] = p.p_norm == 2.f ? std::sqrt(sum) : std::pow(sum, 1.f / p.p_norm);
                } else {
                    if (p.count_include_pad) {
                        const int64_t hend = std::min(h0 + (p.KH - 1) * p.dil_h + 1, p.H + p.pad_b);
                        const int64_t wend = std::min(w0 + (p.KW - 1) * p.dil_w + 1, p.W + p.pad_r);
                        count = ((hend - h0 + p.dil_h - 1) / p.dil_h) * ((wend - w0 + p.dil_w - 1) / p.dil_w);
                    }
                    op[oh * p.OW + ow] = count > 0 ? sum / static_cast<float>(count) : 0.f;
                }
            }
        }
    }
}

}  // namespace hexfuse

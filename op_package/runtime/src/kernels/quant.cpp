// quant.cpp: scalar reference of the QDQ boundary; float math in between is done by the float kernels.
#include "hexfuse/kernels/quant.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace hexfuse {
namespace {

template <typename Q>
void quantize_to(const QuantParams& p, void* const* buffers, int64_t begin, int64_t end) {
    const float* x = cf32(buffers, p.x);
    const float* scale = cf32(buffers, p.scale);
    Q* out = static_cast<Q*>(buffers[p.out]);
    const float lo = static_cast<float>(std::numeric_limits<Q>::lowest());
    const float hi = static_cast<float>(std::numeric_limits<Q>::max());
    for (int64_t i = begin; i < end; ++i) {
        const int64_t ch = p.axis_len > 1 ? (i / p.inner) % p.axis_len : 0;
        const float zp = p.zero_point >= 0 ? static_cast<float>(load_int(buffers[p.zero_point], p.qtype, ch)) : 0.f;
        float v = std::nearbyint(x[i] / scale[ch]) + zp;  // default rounding mode: half to even
        v = v != v ? lo : std::min(std::max(v, lo), hi);  // NaN: the lowest code, as ONNX Runtime (and qvector.cpp)
        out[i] = static_cast<Q>(v);
    }
}

}  // namespace

void dequantize(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QuantParams*>(params);
    const float* scale = cf32(buffers, p.scale);
    float* out = f32(buffers, p.out);
    for (int64_t i = begin; i < end; ++i) {
        const int64_t ch = p.axis_len > 1 ? (i / p.inner) % p.axis_len : 0;
        const int64_t zp = p.zero_point >= 0 ? load_int(buffers[p.zero_point], p.qtype, ch) : 0;
        const int64_t q = load_int(buffers[p.x], p.qtype, i);
        out[i] = static_cast<float>(static_cast<int32_t>(q - zp)) * scale[ch];
    }
}

void quantize(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QuantParams*>(params);
    switch (p.qtype) {
        case DType::kU8: quantize_to<uint8_t>(p, buffers, begin, end); break;
        case DType::kI8: quantize_to<int8_t>(p, buffers, begin, end); break;
        case DType::kU16: quantize_to<uint16_t>(p, buffers, begin, end); break;
        case DType::kI16: quantize_to<int16_t>(p, buffers, begin, end); break;
        default: break;  // refused at generation time
    }
}

}  // namespace hexfuse

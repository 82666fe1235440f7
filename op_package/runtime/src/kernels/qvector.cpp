// qvector.cpp: scalar reference of the quantized vector kernels (qvector.h); the per-element integer
// arithmetic is qarith.h's. Hexagon builds (__HVX__) run each contiguous run through hvx_qvector.h first
// and finish its ragged end here.
#include "hexfuse/kernels/qvector.h"

#include <algorithm>
#include <cmath>

#ifdef __HVX__
#include "hexfuse/kernels/hvx_qvector.h"
#endif

namespace hexfuse {
namespace {

inline const uint8_t* cbytes(void* const* b, int32_t i) { return static_cast<const uint8_t*>(b[i]); }
inline uint8_t* bytes(void* const* b, int32_t i) { return static_cast<uint8_t*>(b[i]); }

// One run of QBinary with the op and signedness as constants, so the host compiler can vectorise it
// (the arithmetic is still qarith.h's, inlined).
template <int32_t Op, int Signed>
void qbinary_run(hexfuse_qbinary p, const uint8_t* a, int64_t as, const uint8_t* b, int64_t bs, uint8_t* out,
                 int64_t j, int64_t n) {
    p.op = Op;
    p.is_signed = Signed;
    for (; j < n; ++j) {
        out[j] = static_cast<uint8_t>(
            hexfuse_qbinary_one(&p, hexfuse_code8(a, j * as, Signed), hexfuse_code8(b, j * bs, Signed)));
    }
}

void qbinary_any(const hexfuse_qbinary& p, const uint8_t* a, int64_t as, const uint8_t* b, int64_t bs, uint8_t* out,
                 int64_t j, int64_t n) {
    switch (p.op * 2 + (p.is_signed ? 1 : 0)) {
        case HEXFUSE_QADD * 2: qbinary_run<HEXFUSE_QADD, 0>(p, a, as, b, bs, out, j, n); break;
        case HEXFUSE_QADD * 2 + 1: qbinary_run<HEXFUSE_QADD, 1>(p, a, as, b, bs, out, j, n); break;
        case HEXFUSE_QSUB * 2: qbinary_run<HEXFUSE_QSUB, 0>(p, a, as, b, bs, out, j, n); break;
        case HEXFUSE_QSUB * 2 + 1: qbinary_run<HEXFUSE_QSUB, 1>(p, a, as, b, bs, out, j, n); break;
        case HEXFUSE_QMUL * 2: qbinary_run<HEXFUSE_QMUL, 0>(p, a, as, b, bs, out, j, n); break;
        default: qbinary_run<HEXFUSE_QMUL, 1>(p, a, as, b, bs, out, j, n); break;
    }
}

}  // namespace

namespace {

template <typename Q>
void quantize_codes(const float* x, Q* q, int64_t begin, int64_t end, float scale, int32_t zero, double lo, double hi) {
    for (int64_t i = begin; i < end; ++i) {
        double v = std::nearbyint(static_cast<double>(x[i]) / scale) + zero;  // half to even
        if (!(v >= lo)) v = lo;  // NaN too
        q[i] = static_cast<Q>(v > hi ? hi : v);
    }
}

}  // namespace

void qdequantize_port(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QConvertParams*>(params);
    float* y = f32(buffers, p.out);
    for (int64_t i = begin; i < end; ++i) y[i] = p.scale * static_cast<float>(load_int(buffers[p.in], p.qtype, i) - p.zero);
}

void qquantize_port(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QConvertParams*>(params);
    const float* x = cf32(buffers, p.in);
    void* q = buffers[p.out];
    switch (p.qtype) {
        case DType::kU8: quantize_codes(x, static_cast<uint8_t*>(q), begin, end, p.scale, p.zero, 0, 255); break;
        case DType::kI8: quantize_codes(x, static_cast<int8_t*>(q), begin, end, p.scale, p.zero, -128, 127); break;
        case DType::kU16: quantize_codes(x, static_cast<uint16_t*>(q), begin, end, p.scale, p.zero, 0, 65535); break;
        case DType::kI16: quantize_codes(x, static_cast<int16_t*>(q), begin, end, p.scale, p.zero, -32768, 32767); break;
        default: break;  // refused at generation time
    }
}

void qlookup_u8(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QLookupParams*>(params);
    const uint8_t* in = cbytes(buffers, p.in);
    uint8_t* out = bytes(buffers, p.out);
#ifdef __HVX__
    begin += static_cast<int64_t>(
        hexfuse_hvx_lookup_u8(out + begin, in + begin, static_cast<size_t>(end - begin), p.hvx_lut.data()));
#endif
    for (int64_t i = begin; i < end; ++i) out[i] = p.lut[in[i]];
}

void qbinary_8(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QBinaryParams*>(params);
    const uint8_t* a = cbytes(buffers, p.a);
    const uint8_t* b = cbytes(buffers, p.b);
    uint8_t* out = bytes(buffers, p.out);
    const int last = p.rank - 1;
    const int64_t as = p.a_strides[last], bs = p.b_strides[last];
    Dims coords{};
    for (int64_t i = begin; i < end;) {
        unravel(i, p.out_dims, p.rank, &coords);
        const int64_t run = std::min(end - i, p.out_dims[last] - coords[last]);
        const uint8_t* ap = a + dot(coords, p.a_strides, p.rank);
        const uint8_t* bp = b + dot(coords, p.b_strides, p.rank);
        int64_t j = 0;
#ifdef __HVX__
        if ((as == 0 || as == 1) && (bs == 0 || bs == 1)) {
            j = static_cast<int64_t>(hexfuse_hvx_qbinary_8(out + i, ap, static_cast<size_t>(as), bp,
                                                           static_cast<size_t>(bs), static_cast<size_t>(run), &p.arith));
        }
#endif
        qbinary_any(p.arith, ap, as, bp, bs, out + i, j, run);
        i += run;
    }
}

void qrowmean_8(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QRowMeanParams*>(params);
    const uint8_t* in = cbytes(buffers, p.in);
    uint8_t* out = bytes(buffers, p.out);
    for (int64_t row = begin; row < end; ++row) {
        const uint8_t* x = in + row * p.len;
        int64_t sum = 0, j = 0;
#ifdef __HVX__
        j = static_cast<int64_t>(hexfuse_hvx_sum_8(x, static_cast<size_t>(p.len), p.is_signed, &sum));
#endif
        for (; j < p.len; ++j) sum += hexfuse_code8(x, j, p.is_signed);
        const int64_t v = (sum - p.len * p.in_zero) * p.mult;
        out[row] = static_cast<uint8_t>(hexfuse_saturate8(hexfuse_rne_shift64(v, p.shift) + p.out_zero, p.is_signed));
    }
}

void qsoftmax_8(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QSoftmaxParams*>(params);
    const uint8_t* in = cbytes(buffers, p.in);
    uint8_t* out = bytes(buffers, p.out);
    const float lo = p.out_signed ? -128.f : 0.f, hi = p.out_signed ? 127.f : 255.f;
    for (int64_t row = begin; row < end; ++row) {
        const uint8_t* x = in + row * p.len;
        int32_t top = hexfuse_code8(x, 0, p.in_signed);
        for (int64_t j = 1; j < p.len; ++j) top = std::max(top, hexfuse_code8(x, j, p.in_signed));
        float sum = 0.f;
        for (int64_t j = 0; j < p.len; ++j) sum += p.exp_table[top - hexfuse_code8(x, j, p.in_signed)];
        const float inv = 1.f / sum;  // as ONNX Runtime's softmax: one reciprocal, then products
        for (int64_t j = 0; j < p.len; ++j) {
            const float y = p.exp_table[top - hexfuse_code8(x, j, p.in_signed)] * inv;
            const float q = std::nearbyint(y / p.out_scale) + static_cast<float>(p.out_zero);  // half to even
            out[row * p.len + j] = static_cast<uint8_t>(static_cast<int32_t>(std::min(std::max(q, lo), hi)));
        }
    }
}

namespace {

// out[i] = max(a[i], b[i]) over codes, i < n.
void max_rows(uint8_t* out, const uint8_t* a, const uint8_t* b, int64_t n, int is_signed) {
    int64_t i = 0;
#ifdef __HVX__
    i = static_cast<int64_t>(hexfuse_hvx_max_8(out, a, b, static_cast<size_t>(n), is_signed));
#endif
    for (; i < n; ++i) out[i] = hexfuse_max_code8(a[i], b[i], is_signed);
}

// out[i] = max over k < taps of in[i + k * step], i < n.
void window_max(uint8_t* out, const uint8_t* in, int64_t n, int64_t taps, int64_t step, int is_signed) {
    int64_t i = 0;
#ifdef __HVX__
    i = static_cast<int64_t>(hexfuse_hvx_window_max_8(out, in, static_cast<size_t>(n), static_cast<size_t>(taps),
                                                      static_cast<size_t>(step), is_signed));
#endif
    for (; i < n; ++i) {
        uint8_t m = in[i];
        for (int64_t k = 1; k < taps; ++k) m = hexfuse_max_code8(m, in[i + k * step], is_signed);
        out[i] = m;
    }
}

}  // namespace

void qmaxpool_8(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const QMaxPoolParams*>(params);
    const PoolParams& g = p.pool;
    const uint8_t* in = cbytes(buffers, p.in);
    uint8_t* out = bytes(buffers, p.out);
    const uint8_t lowest = p.is_signed ? 0x80 : 0x00;
    const int64_t span = (g.OW - 1) * g.stride_w + 1;  // window starts the outputs pick from
    const int64_t len = std::max(g.pad_l + g.W, span + (g.KW - 1) * g.dil_w);  // <= kQPoolRow (generation time)
    uint8_t row[kQPoolRow], full[kQPoolRow];  // row: the padded row, full: the max at every window start
    for (int64_t unit = begin; unit < end; ++unit) {
        const uint8_t* x = in + unit * g.H * g.W;
        uint8_t* y = out + unit * g.OH * g.OW;
        for (int64_t oh = 0; oh < g.OH; ++oh) {
            std::fill(row, row + g.pad_l, lowest);
            std::fill(row + g.pad_l + g.W, row + len, lowest);
            bool first = true;
            for (int64_t kh = 0; kh < g.KH; ++kh) {
                const int64_t ih = oh * g.stride_h - g.pad_t + kh * g.dil_h;
                if (ih < 0 || ih >= g.H) continue;
                if (first) {
                    std::copy(x + ih * g.W, x + (ih + 1) * g.W, row + g.pad_l);
                } else {
                    max_rows(row + g.pad_l, row + g.pad_l, x + ih * g.W, g.W, p.is_signed);
                }
                first = false;
            }
            window_max(full, row, span, g.KW, g.dil_w, p.is_signed);
            for (int64_t ow = 0; ow < g.OW; ++ow) {
                const uint8_t m = full[ow * g.stride_w];
                y[oh * g.OW + ow] = p.has_lut ? p.lut[m] : m;
            }
        }
    }
}

}  // namespace hexfuse

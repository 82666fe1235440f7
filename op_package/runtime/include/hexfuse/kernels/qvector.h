// qvector.h: quantized vector kernels. Each one replaces a DequantizeLinear -> op -> QuantizeLinear unit
// of a task (op_package/lower/qdq_fusion.py) on per-tensor 8-bit data; everything that depends only on
// static data (lookup tables, fixed-point multipliers, zero points) is computed in Python at generation
// time and arrives here as params. The scalar loops below are the definition; Hexagon builds (__HVX__)
// run the bulk through src/kernels/hvx/hvx_qvector.cpp first (hvx_qvector.h), bit for bit the same.
//
// Integer requantization (QBinary, QRowMean): a real-valued result r = m * v / 2^shift is rounded with
// ONNX's rule (half to even) entirely in integers:
//     rne_shift(v, s) = (v + 2^(s-1) - 1 + ((v >> s) & 1)) >> s        (s >= 1, >> arithmetic)
// then the output zero point is added and the sum saturated to the 8-bit range.
#pragma once

#include "hexfuse/kernels/common.h"
#include "hexfuse/kernels/pool.h"
#include "hexfuse/kernels/qarith.h"

namespace hexfuse {

// y = lut[x] for every byte. Work unit: one element.
struct QLookupParams {
    int32_t in = -1, out = -1;
    std::array<uint8_t, 256> lut{};      // indexed by the input byte (int8 codes as their two's complement byte)
    std::array<uint8_t, 256> hvx_lut{};  // the same table in vlut32 order (hvx_qvector.h), computed in Python
};

// Add / Sub: v = a_mult * a + b_mult * b + bias          (bias = -a_mult * a_zero - b_mult * b_zero)
// Mul:       v = a_mult * ((a - a_zero) * (b - b_zero))
// out = saturate(rne_shift(v, shift) + out_zero): hexfuse_qbinary_one (qarith.h). Multipliers are at most
// 21 bits (Add/Sub) or 14 bits (Mul) and shift is in [1, 24], so every intermediate fits int32
// (lower/qfixed.py bounds them). Work unit: one output element; operands broadcast as BinaryParams
// (elementwise.h) with dims coalesced at generation time, so a contiguous operand is one long run.
struct QBinaryParams {
    int32_t a = -1, b = -1, out = -1;
    hexfuse_qbinary arith{};
    int32_t rank = 1;
    Dims out_dims{}, a_strides{}, b_strides{};
};

// Mean over the last `len` elements of each row (ReduceMean over trailing axes, keepdims or not):
// out = saturate(rne_shift((sum - len * in_zero) * mult, shift) + out_zero) in int64. Work unit: one row.
struct QRowMeanParams {
    int32_t in = -1, out = -1;
    int32_t is_signed = 0;
    int64_t len = 1;
    int32_t in_zero = 0, out_zero = 0;
    int64_t mult = 0;
    int32_t shift = 1;
};

// Softmax over the last `len` elements of each row: e_i = exp_table[max - x_i] (float, the exact
// float32 exp(scale_in * -(d)) computed in Python), y_i = e_i / sum(e), then QuantizeLinear(y). The
// exponentials are the float chain's, so only the summation order differs from it. Work unit: one row.
struct QSoftmaxParams {
    int32_t in = -1, out = -1;
    int32_t in_signed = 0, out_signed = 0;
    int64_t len = 1;
    float out_scale = 1.f;
    int32_t out_zero = 0;
    std::array<float, 256> exp_table{};  // indexed by max - x (0..255)
};

// MaxPool on codes (NCHW, 1-D as H = 1): the largest code of each window, then `lut` when the output
// encoding differs from the input's (requantization is monotone, so it commutes with max). Every window
// holds at least one input element (checked at generation time). Per output row, the window's rows are
// maxed into a padded row of the lowest code, then each output takes the max of its taps along that row:
//
//   rows ih of the window --max--> [lowest x pad_l | W codes | lowest x pad_r] --max of KW taps--> out row
//
// Padded rows are at most kQPoolRow codes (two such rows live on the stack). Work unit: one (n, c) plane.
constexpr int64_t kQPoolRow = 1024;

struct QMaxPoolParams {
    int32_t in = -1, out = -1;
    int32_t is_signed = 0;
    int32_t has_lut = 0;
    PoolParams pool{};  // window geometry (kind and the average / Lp fields are not used)
    std::array<uint8_t, 256> lut{};
};

// Codes <-> float32 at a fused-op port that the plan reads as its codes (qdq_fusion's wire_ports mode):
// exactly the port bridge's conversions (runtime/port.cpp), with the port's encoding baked in:
//     dequantize  y = scale * float(q - zero)
//     quantize    q = saturate(nearbyint(double(x) / scale) + zero), NaN -> the lowest code
// so a port converted inside the plan gives the bytes the bridge would have. Work unit: one element.
struct QConvertParams {
    int32_t in = -1, out = -1;
    DType qtype = DType::kU8;  // the codes' type: kU8, kI8, kU16 or kI16
    float scale = 1.f;
    int32_t zero = 0;
};

void qdequantize_port(const void* params, void* const* buffers, int64_t begin, int64_t end);
void qquantize_port(const void* params, void* const* buffers, int64_t begin, int64_t end);
void qlookup_u8(const void* params, void* const* buffers, int64_t begin, int64_t end);
void qbinary_8(const void* params, void* const* buffers, int64_t begin, int64_t end);
void qrowmean_8(const void* params, void* const* buffers, int64_t begin, int64_t end);
void qsoftmax_8(const void* params, void* const* buffers, int64_t begin, int64_t end);
void qmaxpool_8(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

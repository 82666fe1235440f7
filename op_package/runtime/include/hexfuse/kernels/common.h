// common.h: shared vocabulary of the kernel library (ranks, dtypes, odometer index walks).
//
// Kernels take (params, buffer table, begin, end): params name buffers by index so the same constant
// params serve every run. Shapes are static (specialised from the fusion spec); runtime-valued inputs
// (Slice starts, reduction axes, zero points...) are read from their buffers inside the kernel.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

namespace hexfuse {

constexpr int kMaxRank = 6;
constexpr int kMaxParts = 32;  // inputs of Concat / outputs of Split
using Dims = std::array<int64_t, kMaxRank>;

enum class DType : int32_t { kF32 = 0, kU8, kI8, kU16, kI16, kI32, kI64, kBool };  // kBool: one byte, 0 or 1

inline float* f32(void* const* b, int32_t i) { return static_cast<float*>(b[i]); }
inline const float* cf32(void* const* b, int32_t i) { return static_cast<const float*>(b[i]); }

// Reads element i of an integer buffer of type t as int64 (index and zero-point inputs).
inline int64_t load_int(const void* p, DType t, int64_t i) {
    switch (t) {
        case DType::kU8:
        case DType::kBool: return static_cast<const uint8_t*>(p)[i];
        case DType::kI8: return static_cast<const int8_t*>(p)[i];
        case DType::kU16: return static_cast<const uint16_t*>(p)[i];
        case DType::kI16: return static_cast<const int16_t*>(p)[i];
        case DType::kI32: return static_cast<const int32_t*>(p)[i];
        case DType::kI64: return static_cast<const int64_t*>(p)[i];
        case DType::kF32: return static_cast<int64_t>(static_cast<const float*>(p)[i]);
    }
    return 0;
}

// Splits a linear index into coordinates of dims[0..rank).
inline void unravel(int64_t index, const Dims& dims, int rank, Dims* coords) {
    for (int d = rank - 1; d >= 0; --d) {
        (*coords)[d] = index % dims[d];
        index /= dims[d];
    }
}

// Max / Min as ONNX (and ONNX Runtime) compute them: a NaN on either side is the result. std::max and
// std::min return their first operand when the comparison is false, so they drop a NaN second one.
template <typename T>
inline T nan_max(T a, T b) { return a != a ? a : (b != b ? b : (a < b ? b : a)); }
template <typename T>
inline T nan_min(T a, T b) { return a != a ? a : (b != b ? b : (b < a ? b : a)); }

// A square or a sum of squares with float32's range: ONNX computes them in float, where 1e20 squared is
// already infinite (an L2 norm inf, a normalised row 0); the double accumulation adds precision, not range.
inline double float_range(double v) { return static_cast<double>(static_cast<float>(v)); }

inline int64_t dot(const Dims& coords, const Dims& strides, int rank) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off += coords[d] * strides[d];
    return off;
}

}  // namespace hexfuse

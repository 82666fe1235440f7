// logic.cpp: scalar reference of comparisons, boolean logic, integer Mod, Where, IsNaN/IsInf, Not.
// Hexagon builds (__HVX__) run dense one-byte comparisons / logic and Not through hvx_logic.h first.
#include "hexfuse/kernels/logic.h"

#include <cmath>
#include <type_traits>

#ifdef __HVX__
#include "hexfuse/kernels/hvx_logic.h"
#endif

namespace hexfuse {
namespace {

template <typename T>
T int_mod(T a, T b, bool fmod) {
    if (b == 0) return 0;  // undefined in ONNX; never trap
    if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;  // avoids the INT_MIN % -1 overflow trap
    }
    T r = static_cast<T>(a % b);
    if constexpr (std::is_signed_v<T>) {
        if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
    }
    return r;
}

template <typename T>
void typed_rows(const TypedBinaryParams& p, const T* a, const T* b, void* out, int64_t begin, int64_t end) {
    uint8_t* ob = static_cast<uint8_t*>(out);
    T* ot = static_cast<T*>(out);
    Dims c{};
    for (int64_t i = begin; i < end; ++i) {
        unravel(i, p.out_dims, p.rank, &c);
        const T x = a[dot(c, p.a_strides, p.rank)];
        const T y = b[dot(c, p.b_strides, p.rank)];
        switch (p.op) {
            case TypedOp::kEqual: ob[i] = x == y; break;
            case TypedOp::kLess: ob[i] = x < y; break;
            case TypedOp::kGreater: ob[i] = x > y; break;
            case TypedOp::kLessOrEqual: ob[i] = x <= y; break;
            case TypedOp::kGreaterOrEqual: ob[i] = x >= y; break;
            case TypedOp::kAnd: ob[i] = (x != 0) && (y != 0); break;
            case TypedOp::kOr: ob[i] = (x != 0) || (y != 0); break;
            case TypedOp::kXor: ob[i] = (x != 0) != (y != 0); break;
            case TypedOp::kMod:
            case TypedOp::kFmod:
                if constexpr (std::is_integral_v<T>) {
                    ot[i] = int_mod<T>(x, y, p.op == TypedOp::kFmod);
                } else {
                    ot[i] = static_cast<T>(std::fmod(x, y));
                }
                break;
        }
    }
}

template <typename T>
void typed_dispatch(const TypedBinaryParams& p, void* const* buffers, int64_t begin, int64_t end) {
    typed_rows<T>(p, static_cast<const T*>(buffers[p.a]), static_cast<const T*>(buffers[p.b]), buffers[p.out],
                  begin, end);
}

#ifdef __HVX__
static_assert(HEXFUSE_HVX_EQ == static_cast<int>(TypedOp::kEqual) && HEXFUSE_HVX_LT == static_cast<int>(TypedOp::kLess) &&
                  HEXFUSE_HVX_GT == static_cast<int>(TypedOp::kGreater) &&
                  HEXFUSE_HVX_LE == static_cast<int>(TypedOp::kLessOrEqual) &&
                  HEXFUSE_HVX_GE == static_cast<int>(TypedOp::kGreaterOrEqual) &&
                  HEXFUSE_HVX_AND == static_cast<int>(TypedOp::kAnd) && HEXFUSE_HVX_OR == static_cast<int>(TypedOp::kOr) &&
                  HEXFUSE_HVX_XOR == static_cast<int>(TypedOp::kXor) &&
                  HEXFUSE_HVX_LOGIC_OPS == static_cast<int>(TypedOp::kMod),
              "hvx_logic.h op numbers are TypedOp's");

// True when operand strides walk the output in row-major order (no broadcast but size-1 dims).
bool dense(const Dims& strides, const Dims& dims, int rank) {
    int64_t s = 1;
    for (int d = rank - 1; d >= 0; --d) {
        if (dims[d] != 1 && strides[d] != s) return false;
        s *= dims[d];
    }
    return true;
}

// Elements [begin, begin + done) of a one-byte comparison / logic op done by HVX; 0 when not applicable.
int64_t vector_prefix(const TypedBinaryParams& p, void* const* buffers, int64_t begin, int64_t end) {
    const bool one_byte = p.type == DType::kU8 || p.type == DType::kBool || p.type == DType::kI8;
    if (!one_byte || p.op > TypedOp::kXor || !dense(p.a_strides, p.out_dims, p.rank) ||
        !dense(p.b_strides, p.out_dims, p.rank)) {
        return 0;
    }
    const auto* a = static_cast<const uint8_t*>(buffers[p.a]) + begin;
    const auto* b = static_cast<const uint8_t*>(buffers[p.b]) + begin;
    auto* out = static_cast<uint8_t*>(buffers[p.out]) + begin;
    return static_cast<int64_t>(hexfuse_hvx_compare_u8(out, a, b, static_cast<size_t>(end - begin),
                                                       static_cast<int>(p.op), p.type == DType::kI8));
}
#endif

}  // namespace

void typed_binary(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const TypedBinaryParams*>(params);
#ifdef __HVX__
    begin += vector_prefix(p, buffers, begin, end);
#endif
    switch (p.type) {
        case DType::kF32: typed_dispatch<float>(p, buffers, begin, end); break;
        case DType::kU8:
        case DType::kBool: typed_dispatch<uint8_t>(p, buffers, begin, end); break;
        case DType::kI8: typed_dispatch<int8_t>(p, buffers, begin, end); break;
        case DType::kU16: typed_dispatch<uint16_t>(p, buffers, begin, end); break;
        case DType::kI16: typed_dispatch<int16_t>(p, buffers, begin, end); break;
        case DType::kI32: typed_dispatch<int32_t>(p, buffers, begin, end); break;
        case DType::kI64: typed_dispatch<int64_t>(p, buffers, begin, end); break;
    }
}

void where_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const WhereParams*>(params);
    const uint8_t* cond = static_cast<const uint8_t*>(buffers[p.cond]);
    const char* x = static_cast<const char*>(buffers[p.x]);
    const char* y = static_cast<const char*>(buffers[p.y]);
    char* out = static_cast<char*>(buffers[p.out]);
    const size_t size = static_cast<size_t>(p.elem_size);
    Dims c{};
    for (int64_t i = begin; i < end; ++i) {
        unravel(i, p.out_dims, p.rank, &c);
        const char* src = cond[dot(c, p.cond_strides, p.rank)] ? x + dot(c, p.x_strides, p.rank) * p.elem_size
                                                                 : y + dot(c, p.y_strides, p.rank) * p.elem_size;
        std::memcpy(out + i * p.elem_size, src, size);
    }
}

void classify_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ClassifyParams*>(params);
    const float* in = cf32(buffers, p.in);
    uint8_t* out = static_cast<uint8_t*>(buffers[p.out]);
    for (int64_t i = begin; i < end; ++i) {
        const float v = in[i];
        if (p.kind == 0) {
            out[i] = std::isnan(v);
        } else {
            out[i] = std::isinf(v) && ((v > 0.f && p.detect_positive) || (v < 0.f && p.detect_negative));
        }
    }
}

void not_bool(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const NotParams*>(params);
    const uint8_t* in = static_cast<const uint8_t*>(buffers[p.in]);
    uint8_t* out = static_cast<uint8_t*>(buffers[p.out]);
#ifdef __HVX__
    begin += static_cast<int64_t>(hexfuse_hvx_not_u8(out + begin, in + begin, static_cast<size_t>(end - begin)));
#endif
    for (int64_t i = begin; i < end; ++i) out[i] = in[i] ? 0 : 1;
}

}  // namespace hexfuse

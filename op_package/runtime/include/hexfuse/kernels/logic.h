// logic.h: typed elementwise ops beyond float32 arithmetic: comparisons and boolean logic (bool out),
// integer Mod, Where (any element size), IsNaN / IsInf, Not. numpy broadcasting; unit: one output element.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

enum class TypedOp : int32_t {
    kEqual = 0, kLess, kGreater, kLessOrEqual, kGreaterOrEqual,  // any dtype in, bool out
    kAnd, kOr, kXor,                                             // bool in, bool out
    kMod, kFmod                                                  // integer in and out (Mod fmod=0 / fmod=1)
};

struct TypedBinaryParams {
    int32_t a = -1, b = -1, out = -1;
    TypedOp op = TypedOp::kEqual;
    DType type = DType::kF32;  // dtype of a and b
    int32_t rank = 1;
    Dims out_dims{}, a_strides{}, b_strides{};
};

struct WhereParams {
    int32_t cond = -1, x = -1, y = -1, out = -1;
    int64_t elem_size = 4;
    int32_t rank = 1;
    Dims out_dims{}, cond_strides{}, x_strides{}, y_strides{};
};

struct ClassifyParams {    // IsNaN (kind 0) / IsInf (kind 1): float32 in, bool out
    int32_t in = -1, out = -1;
    int32_t kind = 0;
    int32_t detect_positive = 1, detect_negative = 1;
};

struct NotParams {
    int32_t in = -1, out = -1;
};

void typed_binary(const void* params, void* const* buffers, int64_t begin, int64_t end);
void where_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void classify_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void not_bool(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

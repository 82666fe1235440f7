// elementwise.h: unary maps and numpy-broadcast binary ops on float32. Work unit: one output element.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

enum class UnaryOp : int32_t {
    kRelu = 0, kSigmoid, kTanh, kErf, kGelu, kGeluTanh, kClip, kLeakyRelu, kNeg, kAbs, kExp, kLog,
    kSqrt, kReciprocal, kSin, kCos, kSoftplus, kElu, kHardSigmoid, kHardSwish, kFloor, kCeil, kIdentity
};

struct UnaryParams {
    int32_t in = -1, out = -1;
    UnaryOp op = UnaryOp::kIdentity;
    float alpha = 0.f, beta = 0.f;    // LeakyRelu/Elu/HardSigmoid constants; Clip bounds when static
    int32_t min_buf = -1, max_buf = -1;  // Clip bounds given as inputs (read at run time)
};

enum class BinaryOp : int32_t { kAdd = 0, kSub, kMul, kDiv, kPow, kMax, kMin };

struct BinaryParams {
    int32_t a = -1, b = -1, out = -1;
    BinaryOp op = BinaryOp::kAdd;
    int32_t rank = 1;
    Dims out_dims{}, a_strides{}, b_strides{};  // broadcast operands have stride 0
};

void unary_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void binary_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

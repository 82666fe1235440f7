// elementwise.h: unary maps and numpy-broadcast binary ops on float32. Work unit: one output element.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

enum class UnaryOp : int32_t {
    kRelu = 0, kSigmoid, kTanh, kErf, kGelu, kGeluTanh, kClip, kLeakyRelu, kNeg, kAbs, kExp, kLog,
    kSqrt, kReciprocal, kSin, kCos, kSoftplus, kElu, kHardSigmoid, kHardSwish, kFloor, kCeil, kIdentity,
    kSign, kRound, kTan, kSinh, kCosh, kAsin, kAcos, kAtan, kAsinh, kAcosh, kAtanh,
    kSelu, kCelu, kMish, kSoftsign, kThresholdedRelu, kShrink
};

struct UnaryParams {
    int32_t in = -1, out = -1;
    UnaryOp op = UnaryOp::kIdentity;
    float alpha = 0.f, beta = 0.f;    // LeakyRelu/Elu/HardSigmoid/Celu/ThresholdedRelu constants; Clip bounds
                                      // when static; Selu alpha, gamma; Shrink lambd, bias
    int32_t min_buf = -1, max_buf = -1;  // Clip bounds given as inputs (read at run time)
};

enum class BinaryOp : int32_t { kAdd = 0, kSub, kMul, kDiv, kPow, kMax, kMin, kPRelu, kFmod };  // PRelu: a = x, b = slope

struct BinaryParams {
    int32_t a = -1, b = -1, out = -1;
    BinaryOp op = BinaryOp::kAdd;
    int32_t rank = 1;
    Dims out_dims{}, a_strides{}, b_strides{};  // broadcast operands have stride 0
};

struct VariadicParams {      // Sum / Mean (and variadic Max / Min) of up to kMaxParts broadcast inputs.
    int32_t out = -1, count = 0;
    int32_t rank = 1;
    int32_t mean = 0;
    BinaryOp op = BinaryOp::kAdd;  // kAdd (Sum, Mean), kMax, kMin
    Dims out_dims{};
    std::array<int32_t, kMaxParts> parts{};
    std::array<Dims, kMaxParts> strides{};
};

void unary_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void binary_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void variadic_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

// hvx_minmax.h: float32 Relu / Clip / Max / Min computed with integer HVX only, bit-identical to the
// scalar kernels in elementwise.cpp, including -0, denormals, infinities and NaN payloads.
//
// Why integer works: for non-NaN floats with bits b (as int32), the key
//     key(b) = b >= 0 ? b : -(b & 0x7fffffff)
// orders exactly like float `<` (+0 and -0 both map to 0, so they compare equal, as IEEE says).
// NaN (magnitude > 0x7f800000) compares false with everything, so each select is masked by !nan:
//     Max  std::max(a, b) = (a < b) ? b : a      -> b where key(a) < key(b) and neither is NaN
//     Min  std::min(a, b) = (b < a) ? b : a      -> b where key(b) < key(a) and neither is NaN
//     Clip std::min(std::max(x, lo), hi)         -> the two selects above, lo and hi not NaN
//     Relu x > 0.f ? x : 0.f                     -> x where 0 < bits(x) <= 0x7f800000, else +0
// The selects move whole 32-bit words, so the chosen operand keeps its exact bits.
//
// These routines do all n elements (the ragged end goes through a stack vector) instead of leaving a
// scalar tail: clang's Hexagon backend (seen with clang-19 -O2) lowers `(a < b) ? b : a` to sfmax /
// sfmin, which return the non-NaN operand and order -0 below +0, unlike the C++ expression and the host
// build. A scalar tail would give the end of a row different NaN / -0 results than its bulk.
#pragma once

#include "hexfuse/kernels/hvx_common.h"

enum { HEXFUSE_HVX_MAX = 0, HEXFUSE_HVX_MIN = 1 };

HEXFUSE_HVX_API size_t hexfuse_hvx_relu_f32(float* out, const float* in, size_t n);
// Returns 0 (nothing done) when lo or hi is NaN.
HEXFUSE_HVX_API size_t hexfuse_hvx_clip_f32(float* out, const float* in, size_t n, float lo, float hi);
// op: HEXFUSE_HVX_MAX or HEXFUSE_HVX_MIN. b_step 1: b is a row like a; b_step 0: b[0] is broadcast.
HEXFUSE_HVX_API size_t hexfuse_hvx_minmax_f32(float* out, const float* a, const float* b, size_t b_step, size_t n,
                                              int op);

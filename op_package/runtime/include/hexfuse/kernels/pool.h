// pool.h: MaxPool / AveragePool / LpPool / global pools on NCHW float32 (1-D as H = 1). Work unit: one (n, c) plane.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

enum class PoolKind : int32_t { kMax = 0, kAverage, kLp };

struct PoolParams {
    int32_t x = -1, out = -1;
    PoolKind kind = PoolKind::kMax;
    int64_t H = 1, W = 1, OH = 1, OW = 1, KH = 1, KW = 1;
    int64_t stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
    int64_t pad_t = 0, pad_l = 0, pad_b = 0, pad_r = 0;
    int32_t count_include_pad = 0;
    float p_norm = 2.f;  // LpPool
};

void pool_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

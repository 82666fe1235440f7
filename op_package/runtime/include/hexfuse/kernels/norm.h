// norm.h: normalisations and Softmax on float32.
//   BatchNormalization, LRN: work unit = one (n, c) plane of `inner` elements.
//   LayerNormalization / RMSNormalization: work unit = one row of `cols` elements.
//   Softmax / LogSoftmax: work unit = one (outer, inner) line of `len` elements along the axis.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

struct BatchNormParams {
    int32_t x = -1, scale = -1, bias = -1, mean = -1, var = -1, out = -1;
    int64_t C = 1, inner = 1;
    float epsilon = 1e-5f;
};

struct LrnParams {
    int32_t x = -1, out = -1;
    int64_t C = 1, inner = 1, size = 1;
    float alpha = 1e-4f, beta = 0.75f, bias = 1.f;
};

struct LayerNormParams {
    int32_t x = -1, scale = -1, bias = -1, out = -1;
    int64_t cols = 1;
    int64_t scale_size = 1, bias_size = 1;  // broadcast over the normalised block
    float epsilon = 1e-5f;
    int32_t rms = 0;
};

struct SoftmaxParams {
    int32_t in = -1, out = -1;
    int64_t len = 1, inner = 1;
    int32_t log = 0;
};

struct GroupNormParams {    // InstanceNormalization (groups = C) / GroupNormalization. Unit: one (n, group).
    int32_t x = -1, scale = -1, bias = -1, out = -1;
    int64_t C = 1, groups = 1, inner = 1;
    int32_t per_channel = 1;  // scale/bias per channel (else per group, GroupNormalization-18)
    float epsilon = 1e-5f;
};

struct MvnParams {          // MeanVarianceNormalization over any axes. Unit: one element of the kept space.
    int32_t in = -1, out = -1;
    int32_t rank = 1;
    Dims dims{};
    int64_t mask = 0;       // bit d set: axis d normalised over
};

enum class LineOp : int32_t { kHardmax = 0, kL1, kL2 };

struct LineParams {         // Hardmax / LpNormalization along one axis. Unit: one (outer, inner) line.
    int32_t in = -1, out = -1;
    int64_t len = 1, inner = 1;
    LineOp op = LineOp::kHardmax;
};

void batchnorm_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void lrn_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void layernorm_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void softmax_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void groupnorm_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void mvn_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void line_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

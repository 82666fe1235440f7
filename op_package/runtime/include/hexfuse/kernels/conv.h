// conv.h: 2-D convolution (1-D as H = 1) with groups, pads, strides, dilations; NCHW float32.
// Work unit: one output plane (n, m). 1x1/stride-1/no-pad convolutions take a GEMM-like path.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

struct ConvParams {
    int32_t x = -1, w = -1, b = -1, out = -1;
    int64_t N = 1, C = 1, H = 1, W = 1, M = 1, OH = 1, OW = 1, KH = 1, KW = 1;
    int64_t stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1, pad_t = 0, pad_l = 0, group = 1;
};

void conv_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

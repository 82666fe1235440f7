// matmul.h: MatMul (numpy batch broadcast) and Gemm on float32. Work unit: one output row of one batch.
//
// On HTP this family is the MATRIX lane (HMX tiles through the QHPI path); here it is a scalar
// reference with a cache-friendly i-k-j loop.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

struct MatMulParams {
    int32_t a = -1, b = -1, c = -1, out = -1;  // c: Gemm bias (optional)
    int64_t M = 1, N = 1, K = 1;
    int32_t batch_rank = 0;
    Dims batch_dims{}, a_batch_strides{}, b_batch_strides{};  // element strides, 0 = broadcast
    int32_t trans_a = 0, trans_b = 0;
    float alpha = 1.f, beta = 1.f;
    int64_t c_stride_m = 0, c_stride_n = 0;
};

void matmul_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

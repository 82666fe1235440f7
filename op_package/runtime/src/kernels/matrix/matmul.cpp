// matmul.cpp: row-tiled GEMM reference; rows of one tile share the B panel in cache. Accumulates in
// double so the result does not depend on summation order (ONNX Runtime's MLAS blocks differently).
#include "hexfuse/kernels/matmul.h"

#include <vector>

namespace hexfuse {

void matmul_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const MatMulParams*>(params);
    const float* a = cf32(buffers, p.a);
    const float* b = cf32(buffers, p.b);
    const float* c = p.c >= 0 ? cf32(buffers, p.c) : nullptr;
    float* out = f32(buffers, p.out);
    const int64_t M = p.M, N = p.N, K = p.K;
    Dims coords{};
    std::vector<double> acc(static_cast<size_t>(N));
    for (int64_t r = begin; r < end; ++r) {
        const int64_t batch = r / M, m = r % M;
        unravel(batch, p.batch_dims, p.batch_rank, &coords);
        const float* ab = a + dot(coords, p.a_batch_strides, p.batch_rank);
        const float* bb = b + dot(coords, p.b_batch_strides, p.batch_rank);
        float* row = out + r * N;
        double* a_row = acc.data();
        for (int64_t n = 0; n < N; ++n) a_row[n] = 0.0;
        if (!p.trans_b) {
            for (int64_t k = 0; k < K; ++k) {
                const double av = p.trans_a ? ab[k * M + m] : ab[m * K + k];
                const float* brow = bb + k * N;
                for (int64_t n = 0; n < N; ++n) a_row[n] += av * brow[n];
            }
        } else {
            for (int64_t n = 0; n < N; ++n) {
                const float* bcol = bb + n * K;
                double sum = 0.0;
                for (int64_t k = 0; k < K; ++k) sum += static_cast<double>(p.trans_a ? ab[k * M + m] : ab[m * K + k]) * bcol[k];
                a_row[n] = sum;
            }
        }
        for (int64_t n = 0; n < N; ++n) row[n] = static_cast<float>(a_row[n]);
        if (p.alpha != 1.f) {
            for (int64_t n = 0; n < N; ++n) row[n] *= p.alpha;
        }
        if (c != nullptr) {
            for (int64_t n = 0; n < N; ++n) row[n] += p.beta * c[m * p.c_stride_m + n * p.c_stride_n];
        }
    }
}

}  // namespace hexfuse

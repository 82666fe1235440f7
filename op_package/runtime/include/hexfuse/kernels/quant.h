// quant.h: DequantizeLinear / QuantizeLinear, per-tensor or per-axis. Work unit: one element.
// Semantics of ONNX Runtime's reference QDQ: y = float(x - zp) * scale; q = saturate(rint(x / scale) + zp)
// with round-half-to-even. Scales and zero points are read from their input buffers at run time.
#pragma once

#include "hexfuse/kernels/common.h"
// Plans name the quantized kernels that replace DQ -> op -> Q units through this header too (the
// generated plan includes a fixed header list: templates/src/fused/op.cpp.j2).
#include "hexfuse/kernels/qvector.h"

namespace hexfuse {

struct QuantParams {
    int32_t x = -1, scale = -1, zero_point = -1, out = -1;
    DType qtype = DType::kU8;   // the quantized side (input of DQ, output of Q)
    int64_t axis_len = 1;       // 1 = per-tensor
    int64_t inner = 1;          // elements after the quantization axis
};

void dequantize(const void* params, void* const* buffers, int64_t begin, int64_t end);
void quantize(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

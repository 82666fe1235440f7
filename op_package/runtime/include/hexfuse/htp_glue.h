// htp_glue.h: what the generated SDK glue (src/ops/*.cpp) calls; portable, so the host build checks it.
#pragma once

#include <cstdint>

#include "hexfuse/task.h"

namespace hexfuse {

// Runs a plan with inline lanes (the calling HTP thread drains them; classic ops own no threads).
int htp_run(const Plan& plan, const void* const* inputs, void* const* outputs, bool serial);

// The QNN EP hands int64 ONNX tensors over as int32: widen for the kernels, narrow results back.
void widen_i32(const void* src, int64_t* dst, int64_t count);
void narrow_i64(const int64_t* src, void* dst, int64_t count);

}  // namespace hexfuse

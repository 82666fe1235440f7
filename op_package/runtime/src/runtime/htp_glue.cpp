// htp_glue.cpp: one inline executor per process for the SDK glue.
#include "hexfuse/htp_glue.h"

#include "hexfuse/executor.h"

namespace hexfuse {

int htp_run(const Plan& plan, const void* const* inputs, void* const* outputs, bool serial) {
    static Executor executor([] {
        LaneConfig config;
        config.threads = false;
        return config;
    }());
    return executor.run(plan, inputs, outputs, serial, nullptr);
}

void widen_i32(const void* src, int64_t* dst, int64_t count) {
    const auto* s = static_cast<const int32_t*>(src);
    for (int64_t i = 0; i < count; ++i) dst[i] = s[i];
}

void narrow_i64(const int64_t* src, void* dst, int64_t count) {
    auto* d = static_cast<int32_t*>(dst);
    for (int64_t i = 0; i < count; ++i) d[i] = static_cast<int32_t>(src[i]);
}

}  // namespace hexfuse

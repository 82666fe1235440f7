// executor.h: one engine executor = one set of resource lanes, reused across runs of any fused op.
#pragma once

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "hexfuse/lane.h"
#include "hexfuse/task.h"
#include "hexfuse/trace.h"

namespace hexfuse {

enum Status : int { kOk = 0, kPlanTooLarge = 2, kOutOfMemory = 3, kStalled = 4 };

struct LaneConfig {
    int workers[kNumResources] = {1, 1, 1};  // quota per resource: matrix, vector, dma
    bool threads = true;       // false: the calling thread drains the lanes (HTP classic ops own no threads)
    int64_t scratch_budget = 0;  // bytes of task scratch alive at once; 0 = unlimited
};

class Executor {
public:
    explicit Executor(const LaneConfig& config);
    ~Executor();
    Executor(const Executor&) = delete;
    Executor& operator=(const Executor&) = delete;

    // Runs one fused op to completion. serial != 0 is the barrier switch: the same micro-ops on the
    // same lanes, chained in plan order. trace may be null.
    int run(const Plan& plan, const void* const* inputs, void* const* outputs, bool serial,
            hexfuse_trace* trace);

    const LaneConfig& config() const { return config_; }

    // Used by run state (executor.cpp): hand a ready micro-op to its resource lane.
    bool launch(Resource resource, LaneItem item);

private:
    void lane_loop(int resource, int lane_id);
    int drain_inline(void* run);

    LaneConfig config_;
    std::unique_ptr<RingQueue> lanes_[kNumResources];
    std::vector<std::thread> workers_;
};

}  // namespace hexfuse

// host_api.cpp: the C ABI of the host build (loaded by op_package/host.py with ctypes).
//
// One process-wide executor: lanes are threads created on first use and reused by every run.
#include <cstdlib>
#include <memory>
#include <mutex>

#include "hexfuse/executor.h"
#include "hexfuse/port.h"
#include "hexfuse/registry.h"

namespace {

std::mutex g_mutex;
std::unique_ptr<hexfuse::Executor> g_executor;
hexfuse::LaneConfig g_config;

hexfuse::Executor& executor() {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_executor) g_executor = std::make_unique<hexfuse::Executor>(g_config);
    return *g_executor;
}

}  // namespace

extern "C" {

int hexfuse_num_ops() { return hexfuse::num_plans(); }

const char* hexfuse_op_type(int index) {
    const hexfuse::Plan* plan = hexfuse::plan_at(index);
    return plan != nullptr ? plan->op_type : nullptr;
}

// Counts of inputs, outputs, micro-ops and tasks of one op (trace capacity = micro-ops + tasks).
int hexfuse_op_info(int index, int* num_inputs, int* num_outputs, int* num_micro_ops, int* num_tasks) {
    const hexfuse::Plan* plan = hexfuse::plan_at(index);
    if (plan == nullptr) return -1;
    *num_inputs = plan->num_inputs;
    *num_outputs = plan->num_outputs;
    *num_micro_ops = plan->num_ops;
    *num_tasks = plan->num_tasks;
    return 0;
}

// Lane quotas and scratch budget; replaces the executor (call between runs only).
int hexfuse_configure(int matrix_workers, int vector_workers, int dma_workers, long long scratch_budget) {
    if (matrix_workers < 1 || vector_workers < 1 || dma_workers < 1) return -1;
    std::lock_guard<std::mutex> lock(g_mutex);
    g_config.workers[0] = matrix_workers;
    g_config.workers[1] = vector_workers;
    g_config.workers[2] = dma_workers;
    g_config.scratch_budget = scratch_budget;
    g_executor.reset();
    return 0;
}

// Describes micro-op i of op `index`: resource, task, node, tile, begin, end.
int hexfuse_micro_op(int index, int i, int* fields, long long* range) {
    const hexfuse::Plan* plan = hexfuse::plan_at(index);
    if (plan == nullptr || i < 0 || i >= plan->num_ops) return -1;
    const hexfuse::MicroOp& m = plan->ops[i];
    fields[0] = static_cast<int>(m.resource);
    fields[1] = m.task;
    fields[2] = m.node;
    fields[3] = m.tile;
    range[0] = m.begin;
    range[1] = m.end;
    return 0;
}

int hexfuse_run(int index, const void* const* inputs, void* const* outputs, int serial, hexfuse_trace* trace) {
    const hexfuse::Plan* plan = hexfuse::plan_at(index);
    if (plan == nullptr) return -1;
    return executor().run(*plan, inputs, outputs, serial != 0, trace);
}

// Runs op `index` the way a backend does: ports in their wire encodings (port.h), micro-ops in plan
// order on the calling thread. Lets the host tests check the boundary conversions without an SDK.
int hexfuse_run_wire(int index, const hexfuse::Wire* inputs, const hexfuse::Wire* outputs) {
    const hexfuse::Plan* plan = hexfuse::plan_at(index);
    if (plan == nullptr) return -1;
    return hexfuse::run_bridged(*plan, inputs, outputs);
}

}  // extern "C"

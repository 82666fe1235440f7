// executor.cpp: the scheduler.
//
//   launch(op) --> [ MATRIX lane ] --worker 0--> kernel(tile) --+
//              --> [ VECTOR lane ] --worker 1..v-> kernel(tile) --+--> complete(op): release successors,
//              --> [  DMA   lane ] --worker ---> kernel(tile) --+    task done -> free scratch, admit next
//
//   time -->      concurrent (serial = 0)            internal-serial (serial = 1)
//   MATRIX   |A0 A1 A2 A3 A4 A5|               |A0 A1 A2 A3 A4 A5|
//   VECTOR   |B0 B1 B2 B3|                                        |B0 B1 B2 B3|
//   scratch  |A....A|B..B|  B's scratch is     |A....A|
//                           freed at B3's end                     |B..B|
//
// Every micro-op carries a dependency counter; it becomes ready (is launched to its lane) when the
// counter reaches zero. Roots of a task hold one extra count, the admission token, released when the
// task's scratch fits the budget. The barrier switch adds one count to every micro-op but the first
// and releases it from the previous micro-op in plan order: one global order through the same lanes,
// queues and kernels. The caller waits on single micro-ops (each task's sinks), never on a task.
#include "hexfuse/executor.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>

namespace hexfuse {
namespace {

using Clock = std::chrono::steady_clock;

struct RunState {
    const Plan* plan = nullptr;
    Executor* exec = nullptr;
    bool serial = false;
    std::vector<void*> buffers;
    std::unique_ptr<std::atomic<int32_t>[]> deps;
    std::unique_ptr<std::atomic<int32_t>[]> task_left;
    std::atomic<int32_t> launched{0};  // on failure the run still waits for these before it returns
    hexfuse_event* events = nullptr;  // null: no trace
    Clock::time_point start;

    std::mutex mutex;  // guards everything below
    std::condition_variable changed;
    std::vector<uint8_t> done;
    int32_t completed = 0;
    int64_t budget = 0, in_use = 0;
    int32_t next_task = 0;
    std::vector<void*> blocks;  // scratch block per task while it runs
    bool failed = false;
};

int64_t now_ns(const RunState& run) {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - run.start).count();
}

void release(RunState& run, int32_t op);

// Admits tasks in order while their scratch fits; a task larger than the budget runs alone.
void admit(RunState& run) {
    std::vector<int32_t> roots;
    {
        std::lock_guard<std::mutex> lock(run.mutex);
        const Plan& plan = *run.plan;
        while (run.next_task < plan.num_tasks) {
            const int32_t t = run.next_task;
            const int64_t need = plan.tasks[t].scratch_bytes;
            if (run.budget > 0 && run.in_use > 0 && run.in_use + need > run.budget) break;
            if (need > 0) {
                const int64_t rounded = (need + 63) / 64 * 64;
                void* block = std::aligned_alloc(64, static_cast<size_t>(rounded));
                if (block == nullptr) { run.failed = true; break; }
                run.blocks[t] = block;
                for (int32_t s = 0; s < plan.num_scratch; ++s) {
                    if (plan.scratch[s].task == t) {
                        run.buffers[plan.scratch[s].buffer] = static_cast<char*>(block) + plan.scratch[s].offset;
                    }
                }
            }
            run.in_use += need;
            if (run.events != nullptr) {
                hexfuse_event& e = run.events[plan.num_ops + t];
                e = hexfuse_event{HEXFUSE_EVENT_SCRATCH, -1, t, -1, -1, static_cast<int32_t>(plan.tasks[t].resource), -1, 0, now_ns(run), -1};
            }
            const TaskInfo& task = plan.tasks[t];
            for (int32_t i = task.first_op; i < task.first_op + task.num_ops; ++i) {
                if (plan.ops[i].num_deps == 0) roots.push_back(i);
            }
            ++run.next_task;
        }
    }
    for (int32_t op : roots) release(run, op);  // outside the lock: release may run ops inline
}

// The last micro-op of a task gives its scratch back at once, so waiting tasks can start.
void finish_task(RunState& run, int32_t t) {
    {
        std::lock_guard<std::mutex> lock(run.mutex);
        std::free(run.blocks[t]);
        run.blocks[t] = nullptr;
        run.in_use -= run.plan->tasks[t].scratch_bytes;
        if (run.events != nullptr) run.events[run.plan->num_ops + t].end_ns = now_ns(run);
    }
    admit(run);
}

void release(RunState& run, int32_t op) {
    if (run.deps[op].fetch_sub(1, std::memory_order_acq_rel) == 1) {
        run.launched.fetch_add(1, std::memory_order_acq_rel);
        if (!run.exec->launch(run.plan->ops[op].resource, LaneItem{&run, op})) {
            run.launched.fetch_sub(1, std::memory_order_acq_rel);
            std::lock_guard<std::mutex> lock(run.mutex);
            run.failed = true;
            run.changed.notify_all();
        }
    }
}

void execute(RunState& run, int32_t op, int lane) {
    const Plan& plan = *run.plan;
    const MicroOp& m = plan.ops[op];
    const int64_t t0 = run.events != nullptr ? now_ns(run) : 0;
    m.fn(m.params, run.buffers.data(), m.begin, m.end);
    if (run.events != nullptr) {
        run.events[op] = hexfuse_event{HEXFUSE_EVENT_MICRO_OP, op, m.task, m.node, m.tile,
                                       static_cast<int32_t>(m.resource), lane, 0, t0, now_ns(run)};
    }
    for (int32_t s = m.succ_begin; s < m.succ_begin + m.succ_count; ++s) release(run, plan.succ[s]);
    if (run.serial && op + 1 < plan.num_ops) release(run, op + 1);
    if (run.task_left[m.task].fetch_sub(1, std::memory_order_acq_rel) == 1) finish_task(run, m.task);
    std::lock_guard<std::mutex> lock(run.mutex);  // notify under the lock: the waiter may free run next
    run.done[op] = 1;
    ++run.completed;
    if (m.is_sink || run.completed == plan.num_ops || run.failed) run.changed.notify_all();
}

// "wait": block until one micro-op has completed.
void wait_op(RunState& run, int32_t op) {
    std::unique_lock<std::mutex> lock(run.mutex);
    run.changed.wait(lock, [&] { return run.done[op] != 0 || run.failed; });
}

void wait_all(RunState& run) {
    std::unique_lock<std::mutex> lock(run.mutex);
    // After a failure (allocation, full lane) not every op runs: wait for those that were launched,
    // so no lane touches this RunState after run() returns.
    run.changed.wait(lock, [&] {
        return run.completed == run.plan->num_ops || (run.failed && run.completed == run.launched.load());
    });
}

}  // namespace

Executor::Executor(const LaneConfig& config) : config_(config) {
    int lane_id = 0;
    for (int r = 0; r < kNumResources; ++r) {
        lanes_[r] = std::make_unique<RingQueue>(4096);
        if (!config_.threads) continue;
        for (int w = 0; w < config_.workers[r]; ++w) {
            workers_.emplace_back([this, r, lane_id] { lane_loop(r, lane_id); });
            ++lane_id;
        }
    }
}

Executor::~Executor() {
    for (auto& lane : lanes_) lane->close();
    for (auto& worker : workers_) worker.join();
}

bool Executor::launch(Resource resource, LaneItem item) {
    return lanes_[static_cast<int>(resource)]->push(item);
}

void Executor::lane_loop(int resource, int lane_id) {
    LaneItem item{};
    while (lanes_[resource]->pop(&item)) execute(*static_cast<RunState*>(item.run), item.op, lane_id);
}

// Without threads the caller drains the lanes round-robin; the order of ready ops is the same rule.
int Executor::drain_inline(void* state) {
    RunState& run = *static_cast<RunState*>(state);
    while (run.completed < run.plan->num_ops) {
        bool progressed = false;
        for (int r = 0; r < kNumResources; ++r) {
            LaneItem item{};
            if (lanes_[r]->try_pop(&item)) {
                execute(*static_cast<RunState*>(item.run), item.op, r);
                progressed = true;
            }
        }
        if (!progressed) return kStalled;
    }
    return kOk;
}

int Executor::run(const Plan& plan, const void* const* inputs, void* const* outputs, bool serial,
                  hexfuse_trace* trace) {
    if (static_cast<size_t>(plan.num_ops) > lanes_[0]->capacity()) return kPlanTooLarge;
    RunState run;
    run.plan = &plan;
    run.exec = this;
    run.serial = serial;
    run.budget = config_.scratch_budget;
    run.buffers.assign(static_cast<size_t>(plan.num_buffers), nullptr);
    for (int32_t i = 0; i < plan.num_inputs; ++i) run.buffers[i] = const_cast<void*>(inputs[i]);
    for (int32_t i = 0; i < plan.num_outputs; ++i) run.buffers[plan.num_inputs + i] = outputs[i];
    run.deps.reset(new std::atomic<int32_t>[plan.num_ops]);
    for (int32_t i = 0; i < plan.num_ops; ++i) {
        const MicroOp& m = plan.ops[i];
        const int32_t token = m.num_deps == 0 ? 1 : 0;  // admission
        const int32_t chain = (serial && i > 0) ? 1 : 0;  // barrier switch
        run.deps[i].store(m.num_deps + token + chain, std::memory_order_relaxed);
    }
    run.task_left.reset(new std::atomic<int32_t>[plan.num_tasks]);
    for (int32_t t = 0; t < plan.num_tasks; ++t) run.task_left[t].store(plan.tasks[t].num_ops);
    run.done.assign(static_cast<size_t>(plan.num_ops), 0);
    run.blocks.assign(static_cast<size_t>(plan.num_tasks), nullptr);
    if (trace != nullptr && trace->capacity >= plan.num_ops + plan.num_tasks) {
        run.events = trace->events;
        trace->count = plan.num_ops + plan.num_tasks;
    } else if (trace != nullptr) {
        trace->count = 0;
    }
    run.start = Clock::now();
    admit(run);
    int status = kOk;
    if (!config_.threads) {
        status = drain_inline(&run);
    } else {
        for (int32_t i = 0; i < plan.num_ops; ++i) {
            if (plan.ops[i].is_sink) wait_op(run, i);
        }
        wait_all(run);
    }
    for (void* block : run.blocks) std::free(block);
    if (run.failed) return kOutOfMemory;
    return status;
}

}  // namespace hexfuse

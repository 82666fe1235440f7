// lane.h: the ring queue behind every resource lane.
//
// Same small API for every queue: push / pop / depth / close. Fixed capacity (power of two): a fused
// op never has more ready micro-ops than micro-ops, so push never overflows once sized for the plan.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

namespace hexfuse {

struct LaneItem {
    void* run;      // the RunState the micro-op belongs to
    int32_t op;
};

class RingQueue {
public:
    explicit RingQueue(size_t capacity_pow2 = 4096) : slots_(capacity_pow2), mask_(capacity_pow2 - 1) {}

    // Returns false when full (caller grows the plan check instead of blocking a lane).
    bool push(LaneItem item) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (tail_ - head_ == slots_.size()) return false;
            slots_[tail_++ & mask_] = item;
        }
        ready_.notify_one();
        return true;
    }

    // Blocks until an item arrives or the queue is closed (then returns false).
    bool pop(LaneItem* item) {
        std::unique_lock<std::mutex> lock(mutex_);
        ready_.wait(lock, [&] { return head_ != tail_ || closed_; });
        if (head_ == tail_) return false;
        *item = slots_[head_++ & mask_];
        return true;
    }

    // Non-blocking pop for the inline (single-thread) executor.
    bool try_pop(LaneItem* item) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (head_ == tail_) return false;
        *item = slots_[head_++ & mask_];
        return true;
    }

    size_t depth() {
        std::lock_guard<std::mutex> lock(mutex_);
        return tail_ - head_;
    }

    size_t capacity() const { return slots_.size(); }

    void close() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            closed_ = true;
        }
        ready_.notify_all();
    }

private:
    std::vector<LaneItem> slots_;
    size_t mask_;
    size_t head_ = 0, tail_ = 0;
    bool closed_ = false;
    std::mutex mutex_;
    std::condition_variable ready_;
};

}  // namespace hexfuse

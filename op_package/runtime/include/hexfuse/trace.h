// trace.h: per-micro-op timestamps, shared by the executor and the host C ABI (plain C layout).
#pragma once

#include <cstdint>

extern "C" {

enum { HEXFUSE_EVENT_MICRO_OP = 0, HEXFUSE_EVENT_SCRATCH = 1 };

// Slot i < num_ops is micro-op i; slot num_ops + t is task t's scratch lifetime (acquire .. release).
typedef struct hexfuse_event {
    int32_t kind, op, task, node, tile, resource, lane, pad;
    int64_t start_ns, end_ns;  // steady clock, relative to the start of the run
} hexfuse_event;

typedef struct hexfuse_trace {
    hexfuse_event* events;
    int32_t capacity;  // must be >= num_ops + num_tasks, else nothing is recorded
    int32_t count;
} hexfuse_trace;

}  // extern "C"

static_assert(sizeof(hexfuse_event) == 48, "hexfuse_event is part of the host ABI");

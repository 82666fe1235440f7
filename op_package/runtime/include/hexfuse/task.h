// task.h: the tagged micro-op and the static plan of one fused op.
//
// A fused op is a set of independent tasks; each task is a short chain/DAG of nodes; each node is cut
// into tiles. One tile of one node is a MicroOp: it carries the resource it runs on (MATRIX / VECTOR /
// DMA), the kernel to call with a [begin, end) range of the kernel's work units, and a static count of
// predecessors. The generator emits these tables as constant data; the executor only adds run state.
#pragma once

#include <cstdint>

namespace hexfuse {

enum class Resource : uint8_t { kMatrix = 0, kVector = 1, kDma = 2 };
constexpr int kNumResources = 3;

// Every kernel has this one signature: its params, the run's buffer table, a range of work units.
using KernelFn = void (*)(const void* params, void* const* buffers, int64_t begin, int64_t end);

struct MicroOp {
    KernelFn fn;
    const void* params;
    int64_t begin, end;     // work-unit range of this tile
    Resource resource;
    int32_t task, node, tile;
    int32_t num_deps;       // predecessors inside the task (serial mode adds one more, see executor.cpp)
    int32_t succ_begin, succ_count;  // successors: Plan::succ[succ_begin .. succ_begin + succ_count)
    int32_t is_sink;        // no successor inside its task: the scheduler waits on it
};

struct TaskInfo {
    const char* id;
    Resource resource;
    int64_t scratch_bytes;  // intermediates of this task, held only while the task runs
    int32_t first_op, num_ops;
};

// Intermediates live in their task's scratch block at a fixed offset.
struct ScratchBuffer {
    int32_t buffer;  // index into the run's buffer table
    int32_t task;
    int64_t offset;
};

// The encoding of a port the plan reads or writes as quantized codes (lower/qdq_ports.py): a backend
// that hands such a port over as plain float32 gets it converted with this encoding (port.cpp).
struct PortQuant {
    int32_t quantized;  // 0: the port is not codes
    float scale;
    int32_t offset;     // real = scale * (q - offset)
};

struct Plan {
    const char* op_type;
    int32_t num_inputs, num_outputs, num_buffers;
    const int32_t* port_types;   // DType (kernels/common.h) of every input, then every output, as the plan reads them
    const int64_t* port_counts;  // elements of every input, then every output
    const MicroOp* ops;
    int32_t num_ops;
    const int32_t* succ;
    const TaskInfo* tasks;
    int32_t num_tasks;
    const ScratchBuffer* scratch;
    int32_t num_scratch;
    const PortQuant* port_quant;  // every input, then every output
};

}  // namespace hexfuse

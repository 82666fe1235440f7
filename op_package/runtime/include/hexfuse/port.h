// port.h: how a fused op's tensors cross a backend boundary, and the in-order runner backends use.
//
// A plan reads and writes its ports in the types of the ONNX function (float32 for a port fed by a
// DequantizeLinear outside the fused node, int64 for index tensors, ...). A backend may hand the same
// tensor over in another encoding: the QNN EP folds the boundary DQ/Q into the port (uint8 + scale
// and offset), narrows int64 to int32, or runs in fp16. A Wire describes what the backend holds;
// run_bridged converts at the boundary, aliasing whenever the bytes already match:
//
//   wire  --to_plan-->  plan buffer  --kernels-->  plan buffer  --from_plan-->  wire
//   u8 (scale, offset)    float32                   float32                      u8 (scale, offset)
//
// Portable C++: the host build tests these conversions against ONNX Runtime without any SDK.
#pragma once

#include <cstdint>

#include "hexfuse/kernels/common.h"
#include "hexfuse/task.h"

namespace hexfuse {

// Element storage on the backend's side: the plan's types plus what only a backend holds (fp16).
enum class WireType : int32_t { kF32 = 0, kU8, kI8, kU16, kI16, kI32, kI64, kBool, kF16 };

struct Wire {
    void* data;
    WireType type;

    int32_t quantized;  // 1: real = scale * (q - offset) (HTP's convention: offset is +zero_point)
    float scale;
    int32_t offset;
    int64_t count;     // elements
};

enum BridgeStatus : int {
    kBridgeOk = 0,
    kBridgeBadCount = 10,  // the backend's tensor does not have the plan's element count
    kBridgeBadType = 11,   // no conversion between the wire type and the plan type
    kBridgeNoMemory = 12,
    kBridgeKernelFailed = 13,
};

// Runs every micro-op of the plan in plan order on the calling thread (plan order is a topological
// order). Reentrant: all state lives on the stack and in per-call scratch. Returns 0 or kBridgeNoMemory.
int run_in_order(const Plan& plan, const void* const* inputs, void* const* outputs);

// Converts inputs to the plan's types, runs the plan in order, converts outputs back.
int run_bridged(const Plan& plan, const Wire* inputs, const Wire* outputs);

}  // namespace hexfuse

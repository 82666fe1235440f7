// ort_ops.h: what the ONNX Runtime custom-op glue (ort_ops.cpp) knows of each fused op.
//
// The executor's Plan has no tensor types or shapes (QNN hands them to the HTP glue), so the ORT build
// generates this table from the fusion spec (op_package/ort_build.py): one row per fused op, in the
// spec's order, which is also the order of the plan registry.
#pragma once

#include <cstdint>

namespace hexfuse {
namespace ort {

struct PortInfo {
    int32_t elem_type;     // ONNXTensorElementDataType (= onnx.TensorProto element type)
    int32_t rank;
    const int64_t* dims;   // rank entries, all static
};

struct OpInfo {
    const char* op_type;   // equals plan_at(index)->op_type
    int32_t num_inputs, num_outputs;
    const PortInfo* inputs;
    const PortInfo* outputs;
};

int num_ops();
const OpInfo* op_at(int index);  // null when out of range

}  // namespace ort
}  // namespace hexfuse

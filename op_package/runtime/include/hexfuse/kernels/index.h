// index.h: index-driven data movement (the DMA lane): Pad, Tile, Trilu, ReverseSequence, GatherElements,
// GatherND, ScatterND, plus the index reductions ArgMax/ArgMin and CumSum. Any element size unless noted;
// runtime-valued inputs (pads, k, sequence_lens, axis) are read from their buffers. Units noted per op.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

enum class PadMode : int32_t { kConstant = 0, kReflect, kEdge, kWrap };

struct PadParams {          // Unit: one output element.
    int32_t in = -1, out = -1;
    int64_t elem_size = 4;
    int32_t rank = 1;
    Dims in_dims{}, out_dims{};
    PadMode mode = PadMode::kConstant;
    int32_t pads = -1, axes = -1, value = -1;  // buffers (opset >= 11); value has the data dtype
    DType pads_type = DType::kI64, axes_type = DType::kI64;
    int32_t axes_count = 0;                    // 0: pads cover every axis
    Dims static_begin{};                       // used when pads < 0 (attribute form)
    float static_value = 0.f;                  // attribute form, float32 data
};

struct TileParams {         // Unit: one output element (repeats follow from the static shapes).
    int32_t in = -1, out = -1;
    int64_t elem_size = 4;
    int32_t rank = 1;
    Dims in_dims{}, out_dims{};
};

struct TriluParams {        // Unit: one element. Matrices are the last two dims (rows x cols).
    int32_t in = -1, out = -1, k = -1;  // k: optional int64 scalar buffer
    int64_t elem_size = 4, rows = 1, cols = 1;
    int32_t upper = 1;
};

struct ReverseSequenceParams {  // Unit: one element.
    int32_t in = -1, lens = -1, out = -1;
    int64_t elem_size = 4;
    int32_t rank = 2, batch_axis = 1, time_axis = 0;
    Dims dims{};
    DType lens_type = DType::kI64;
};

struct GatherElementsParams {  // Unit: one output element (output shape = indices shape).
    int32_t data = -1, indices = -1, out = -1;
    int64_t elem_size = 4;
    int32_t rank = 1, axis = 0;
    Dims out_dims{}, data_dims{};
    DType index_type = DType::kI64;
};

struct GatherNDParams {     // Unit: one index tuple (copies one slice of slice_size elements).
    int32_t data = -1, indices = -1, out = -1;
    int64_t elem_size = 4;
    int32_t k = 1;                    // length of an index tuple
    int64_t tuples_per_batch = 1;     // index tuples per batch_dims position
    int64_t batch_stride = 0;         // data elements per batch_dims position
    int64_t slice_size = 1;           // data elements addressed by one tuple
    Dims index_dims{}, index_strides{};  // data dims / element strides of the k indexed axes
    DType index_type = DType::kI64;
};

struct ScatterNDParams {    // One unit (updates may collide): copy data, then scatter the update slices.
    int32_t data = -1, indices = -1, updates = -1, out = -1;
    int64_t elem_size = 4, data_size = 1;
    int32_t k = 1;
    int64_t tuples = 1, slice_size = 1;
    Dims index_dims{}, index_strides{};
    DType index_type = DType::kI64;
    int32_t reduction = 0;  // 0 none, 1 add, 2 mul, 3 max, 4 min (float32 only)
};

struct ArgParams {          // ArgMax / ArgMin over float32, int64 out. Unit: one (outer, inner) line.
    int32_t in = -1, out = -1;
    int64_t len = 1, inner = 1;
    int32_t max = 1, last = 0;  // select_last_index
};

struct CumSumParams {       // One unit: the axis is a runtime input. float32 / int32 / int64.
    int32_t in = -1, axis = -1, out = -1;
    DType type = DType::kF32, axis_type = DType::kI64;
    int32_t rank = 1;
    Dims dims{};
    int32_t exclusive = 0, reverse = 0;
};

void pad_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void tile_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void trilu_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void reverse_sequence_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void gather_elements_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void gather_nd_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void scatter_nd_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void arg_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void cumsum_any(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

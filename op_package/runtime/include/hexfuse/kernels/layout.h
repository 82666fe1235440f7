// layout.h: data movement (the DMA lane): copies, strided copies (Transpose, Expand), Concat, Split,
// Slice, Gather, plus the index ops TopK and ScatterElements. Any element size; work units noted per op.
#pragma once

#include "hexfuse/kernels/common.h"

namespace hexfuse {

struct CopyParams {         // Reshape/Flatten/Squeeze/Unsqueeze/Identity. Unit: one element.
    int32_t in = -1, out = -1;
    int64_t elem_size = 4;
};

struct CastParams {         // Cast between numeric dtypes (float -> int truncates, as C does). Unit: element.
    int32_t in = -1, out = -1;
    DType from = DType::kF32, to = DType::kF32;
};

struct StridedCopyParams {  // Transpose (permuted strides), Expand (0 strides). Unit: one output element.
    int32_t in = -1, out = -1;
    int64_t elem_size = 4;
    int32_t rank = 1;
    Dims out_dims{}, in_strides{};
};

struct ConcatParams {       // Unit: one outer row (product of dims before axis).
    int32_t out = -1;
    int64_t elem_size = 4, out_row = 0;  // out_row: elements of the output per outer index
    int32_t count = 0;
    std::array<int32_t, kMaxParts> parts{};
    std::array<int64_t, kMaxParts> part_row{};
};

struct SplitParams {        // Unit: one outer row. Same layout as Concat, reversed.
    int32_t in = -1;
    int64_t elem_size = 4, in_row = 0;
    int32_t count = 0;
    std::array<int32_t, kMaxParts> parts{};
    std::array<int64_t, kMaxParts> part_row{};
};

struct SliceParams {        // Unit: one output element. starts/steps resolved from inputs at run time.
    int32_t in = -1, out = -1;
    int64_t elem_size = 4;
    int32_t rank = 1;
    Dims in_dims{}, out_dims{};
    int32_t starts = -1, ends = -1, axes = -1, steps = -1;  // int buffers (opset >= 10)
    DType index_type = DType::kI64;
    int64_t count = 0;      // length of starts
    Dims static_start{}, static_step{};  // used when starts < 0 (attribute form)
};

struct GatherParams {       // Unit: one output element.
    int32_t data = -1, indices = -1, out = -1;
    int64_t elem_size = 4, outer = 1, axis_len = 1, inner = 1, num_indices = 1;
    DType index_type = DType::kI64;
};

struct TopKParams {         // Unit: one (outer, inner) line along the axis.
    int32_t x = -1, values = -1, indices = -1;
    int64_t len = 1, inner = 1, k = 1;
    int32_t largest = 1;
};

struct ScatterParams {      // One unit (writes may collide, so it is one tile): copy data, then scatter.
    int32_t data = -1, indices = -1, updates = -1, out = -1;
    int32_t rank = 1, axis = 0;
    Dims data_dims{}, upd_dims{};
    DType index_type = DType::kI64;
    int32_t reduction = 0;  // 0 none, 1 add, 2 mul, 3 max, 4 min
};

void copy_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void cast_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void strided_copy(const void* params, void* const* buffers, int64_t begin, int64_t end);
void concat_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void split_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void slice_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void gather_any(const void* params, void* const* buffers, int64_t begin, int64_t end);
void topk_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);
void scatter_elements_f32(const void* params, void* const* buffers, int64_t begin, int64_t end);

}  // namespace hexfuse

// index.cpp: scalar reference of Pad, Tile, Trilu, ReverseSequence, GatherElements, GatherND, ScatterND,
// ArgMax/ArgMin and CumSum. Out-of-range indices are clamped (ONNX leaves them undefined; never fault).
#include "hexfuse/kernels/index.h"

#include <algorithm>
#include <cmath>

namespace hexfuse {
namespace {

inline char* bytes(void* const* b, int32_t i) { return static_cast<char*>(b[i]); }

inline int64_t wrap_index(int64_t i, int64_t n) {
    if (i < 0) i += n;
    return std::clamp<int64_t>(i, 0, n - 1);
}

// Source coordinate of output coordinate c along one axis of length n; -1 for the constant fill.
inline int64_t pad_source(int64_t i, int64_t n, PadMode mode) {
    if (i >= 0 && i < n) return i;
    switch (mode) {
        case PadMode::kConstant: return -1;
        case PadMode::kEdge: return i < 0 ? 0 : n - 1;
        case PadMode::kWrap: return ((i % n) + n) % n;
        case PadMode::kReflect:
            if (n == 1) return 0;
            while (i < 0 || i >= n) i = i < 0 ? -i : 2 * (n - 1) - i;
            return i;
    }
    return -1;
}

}  // namespace

void pad_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const PadParams*>(params);
    Dims lead = p.static_begin;
    if (p.pads >= 0) {
        lead = Dims{};
        const int32_t count = p.axes_count > 0 ? p.axes_count : p.rank;
        for (int32_t j = 0; j < count; ++j) {
            int64_t axis = j;
            if (p.axes >= 0) {
                axis = load_int(buffers[p.axes], p.axes_type, j);
                if (axis < 0) axis += p.rank;
                if (axis < 0 || axis >= p.rank) continue;
            }
            lead[axis] = load_int(buffers[p.pads], p.pads_type, j);
        }
    }
    const char* in = bytes(buffers, p.in);
    char* out = bytes(buffers, p.out);
    const size_t size = static_cast<size_t>(p.elem_size);
    const float fill = p.static_value;
    Dims c{};
    for (int64_t i = begin; i < end; ++i) {
        unravel(i, p.out_dims, p.rank, &c);
        int64_t off = 0;
        bool inside = true;
        for (int d = 0; d < p.rank && inside; ++d) {
            const int64_t s = pad_source(c[d] - lead[d], p.in_dims[d], p.mode);
            inside = s >= 0;
            off = off * p.in_dims[d] + s;
        }
        char* dst = out + i * p.elem_size;
        if (inside) {
            std::memcpy(dst, in + off * p.elem_size, size);
        } else if (p.value >= 0) {
            std::memcpy(dst, buffers[p.value], size);
        } else if (fill != 0.f) {
            std::memcpy(dst, &fill, sizeof(float));  // attribute form: float32 data only
        } else {
            std::memset(dst, 0, size);
        }
    }
}

void tile_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const TileParams*>(params);
    const char* in = bytes(buffers, p.in);
    char* out = bytes(buffers, p.out);
    Dims c{};
    for (int64_t i = begin; i < end; ++i) {
        unravel(i, p.out_dims, p.rank, &c);
        int64_t off = 0;
        for (int d = 0; d < p.rank; ++d) off = off * p.in_dims[d] + c[d] % p.in_dims[d];
        std::memcpy(out + i * p.elem_size, in + off * p.elem_size, static_cast<size_t>(p.elem_size));
    }
}

void trilu_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const TriluParams*>(params);
    const int64_t k = p.k >= 0 ? load_int(buffers[p.k], DType::kI64, 0) : 0;
    const char* in = bytes(buffers, p.in);
    char* out = bytes(buffers, p.out);
    const size_t size = static_cast<size_t>(p.elem_size);
    for (int64_t i = begin; i < end; ++i) {
        const int64_t col = i % p.cols, row = (i / p.cols) % p.rows;
        const bool keep = p.upper ? col - row >= k : col - row <= k;
        if (keep) {
            std::memcpy(out + i * p.elem_size, in + i * p.elem_size, size);
        } else {
            std::memset(out + i * p.elem_size, 0, size);
        }
    }
}

void reverse_sequence_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ReverseSequenceParams*>(params);
    const char* in = bytes(buffers, p.in);
    char* out = bytes(buffers, p.out);
    const int64_t steps = p.dims[p.time_axis];
    Dims c{};
    for (int64_t i = begin; i < end; ++i) {
        unravel(i, p.dims, p.rank, &c);
        const int64_t len = std::clamp<int64_t>(load_int(buffers[p.lens], p.lens_type, c[p.batch_axis]), 0, steps);
        if (c[p.time_axis] < len) c[p.time_axis] = len - 1 - c[p.time_axis];
        int64_t off = 0;
        for (int d = 0; d < p.rank; ++d) off = off * p.dims[d] + c[d];
        std::memcpy(out + i * p.elem_size, in + off * p.elem_size, static_cast<size_t>(p.elem_size));
    }
}

void gather_elements_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const GatherElementsParams*>(params);
    const char* data = bytes(buffers, p.data);
    char* out = bytes(buffers, p.out);
    Dims c{};
    for (int64_t i = begin; i < end; ++i) {
        unravel(i, p.out_dims, p.rank, &c);
        c[p.axis] = wrap_index(load_int(buffers[p.indices], p.index_type, i), p.data_dims[p.axis]);
        int64_t off = 0;
        for (int d = 0; d < p.rank; ++d) off = off * p.data_dims[d] + c[d];
        std::memcpy(out + i * p.elem_size, data + off * p.elem_size, static_cast<size_t>(p.elem_size));
    }
}

void gather_nd_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const GatherNDParams*>(params);
    const char* data = bytes(buffers, p.data);
    char* out = bytes(buffers, p.out);
    const size_t row = static_cast<size_t>(p.slice_size * p.elem_size);
    for (int64_t t = begin; t < end; ++t) {
        int64_t off = (t / p.tuples_per_batch) * p.batch_stride;
        for (int32_t j = 0; j < p.k; ++j) {
            off += wrap_index(load_int(buffers[p.indices], p.index_type, t * p.k + j), p.index_dims[j]) * p.index_strides[j];
        }
        std::memcpy(out + t * static_cast<int64_t>(row), data + off * p.elem_size, row);
    }
}

void scatter_nd_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ScatterNDParams*>(params);
    if (begin >= end) return;
    char* out = bytes(buffers, p.out);
    const char* updates = bytes(buffers, p.updates);
    if (buffers[p.out] != buffers[p.data]) {
        std::memcpy(out, buffers[p.data], static_cast<size_t>(p.data_size * p.elem_size));
    }
    for (int64_t t = 0; t < p.tuples; ++t) {
        int64_t off = 0;
        for (int32_t j = 0; j < p.k; ++j) {
            off += wrap_index(load_int(buffers[p.indices], p.index_type, t * p.k + j), p.index_dims[j]) * p.index_strides[j];
        }
        if (p.reduction == 0) {
            std::memcpy(out + off * p.elem_size, updates + t * p.slice_size * p.elem_size,
                        static_cast<size_t>(p.slice_size * p.elem_size));
            continue;
        }
        float* dst = reinterpret_cast<float*>(out) + off;
        const float* src = reinterpret_cast<const float*>(updates) + t * p.slice_size;
        for (int64_t e = 0; e < p.slice_size; ++e) {
            switch (p.reduction) {
                case 1: dst[e] += src[e]; break;
                case 2: dst[e] *= src[e]; break;
                case 3: dst[e] = std::max(dst[e], src[e]); break;
                default: dst[e] = std::min(dst[e], src[e]); break;
            }
        }
    }
}

void arg_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ArgParams*>(params);
    const float* in = cf32(buffers, p.in);
    int64_t* out = static_cast<int64_t*>(buffers[p.out]);
    for (int64_t u = begin; u < end; ++u) {
        const float* line = in + (u / p.inner) * p.len * p.inner + u % p.inner;
        int64_t best = 0;
        for (int64_t j = 1; j < p.len; ++j) {
            const float v = line[j * p.inner], b = line[best * p.inner];
            const bool better = p.max ? (v > b || (p.last && v == b)) : (v < b || (p.last && v == b));
            if (better) best = j;
        }
        out[u] = best;
    }
}

namespace {

template <typename T>
void cumsum_typed(const CumSumParams& p, const T* in, T* out, int64_t axis) {
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < axis; ++d) outer *= p.dims[d];
    for (int d = static_cast<int>(axis) + 1; d < p.rank; ++d) inner *= p.dims[d];
    const int64_t len = p.dims[axis];
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t in_i = 0; in_i < inner; ++in_i) {
            const int64_t base = o * len * inner + in_i;
            T acc = 0;
            for (int64_t s = 0; s < len; ++s) {
                const int64_t j = p.reverse ? len - 1 - s : s;
                const T v = in[base + j * inner];
                if (p.exclusive) {
                    out[base + j * inner] = acc;
                    acc += v;
                } else {
                    acc += v;
                    out[base + j * inner] = acc;
                }
            }
        }
    }
}

}  // namespace

void cumsum_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const CumSumParams*>(params);
    if (begin >= end) return;
    int64_t axis = load_int(buffers[p.axis], p.axis_type, 0);
    if (axis < 0) axis += p.rank;
    axis = std::clamp<int64_t>(axis, 0, p.rank - 1);
    switch (p.type) {
        case DType::kI32: cumsum_typed<int32_t>(p, static_cast<const int32_t*>(buffers[p.in]), static_cast<int32_t*>(buffers[p.out]), axis); break;
        case DType::kI64: cumsum_typed<int64_t>(p, static_cast<const int64_t*>(buffers[p.in]), static_cast<int64_t*>(buffers[p.out]), axis); break;
        default: cumsum_typed<float>(p, cf32(buffers, p.in), f32(buffers, p.out), axis); break;
    }
}

}  // namespace hexfuse

// layout.cpp: byte-level moves; element size comes from the spec, so one kernel serves every dtype.
// Contiguous runs (copy, Transpose/Expand rows, Concat, Split) go through move_bytes: HVX on Hexagon.
#include "hexfuse/kernels/layout.h"

#include <algorithm>
#include <numeric>
#include <vector>

#ifdef __HVX__
#include "hexfuse/kernels/hvx_copy.h"
#endif

namespace hexfuse {
namespace {

inline char* bytes(void* const* b, int32_t i) { return static_cast<char*>(b[i]); }

// memcpy of one contiguous run; Hexagon builds move the whole vectors with HVX first.
inline void move_bytes(void* dst, const void* src, int64_t n) {
    size_t done = 0;
#ifdef __HVX__
    done = hexfuse_hvx_copy_bytes(dst, src, static_cast<size_t>(n));
#endif
    std::memcpy(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done, static_cast<size_t>(n) - done);
}

// ONNX Slice start for one axis: negative counts from the end, then clamp (to dim-1 for negative steps).
int64_t resolve_start(int64_t start, int64_t dim, int64_t step) {
    if (start < 0) start += dim;
    return step > 0 ? std::clamp<int64_t>(start, 0, dim) : std::clamp<int64_t>(start, 0, dim - 1);
}

}  // namespace

void copy_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const CopyParams*>(params);
    move_bytes(bytes(buffers, p.out) + begin * p.elem_size, bytes(buffers, p.in) + begin * p.elem_size,
               (end - begin) * p.elem_size);
}

namespace {

// From float through double; from an integer directly, so that a narrowing wraps modulo 2^bits (as
// ONNX Runtime's static_cast does; through double it is undefined out of range) and int64 -> float
// rounds once.
template <typename T>
void store_as(void* dst, int64_t i, double v) { static_cast<T*>(dst)[i] = static_cast<T>(v); }
template <typename T>
void store_as(void* dst, int64_t i, int64_t v) { static_cast<T*>(dst)[i] = static_cast<T>(v); }

template <typename V>
void store(DType to, void* out, int64_t i, V v) {
    switch (to) {
        case DType::kF32: store_as<float>(out, i, v); break;
        case DType::kU8: store_as<uint8_t>(out, i, v); break;
        case DType::kI8: store_as<int8_t>(out, i, v); break;
        case DType::kU16: store_as<uint16_t>(out, i, v); break;
        case DType::kI16: store_as<int16_t>(out, i, v); break;
        case DType::kI32: store_as<int32_t>(out, i, v); break;
        case DType::kI64: store_as<int64_t>(out, i, v); break;
        case DType::kBool: static_cast<uint8_t*>(out)[i] = v != 0 ? 1 : 0; break;
    }
}

}  // namespace

void cast_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const CastParams*>(params);
    const void* in = buffers[p.in];
    void* out = buffers[p.out];
    for (int64_t i = begin; i < end; ++i) {
        if (p.from == DType::kF32) {
            store(p.to, out, i, static_cast<double>(static_cast<const float*>(in)[i]));
        } else {
            store(p.to, out, i, load_int(in, p.from, i));
        }
    }
}

void strided_copy(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const StridedCopyParams*>(params);
    const char* in = bytes(buffers, p.in);
    char* out = bytes(buffers, p.out);
    const int last = p.rank - 1;
    Dims c{};
    for (int64_t i = begin; i < end;) {
        unravel(i, p.out_dims, p.rank, &c);
        const int64_t run = std::min(end - i, p.out_dims[last] - c[last]);
        const char* src = in + dot(c, p.in_strides, p.rank) * p.elem_size;
        const int64_t step = p.in_strides[last] * p.elem_size;
        if (step == p.elem_size) {
            move_bytes(out + i * p.elem_size, src, run * p.elem_size);
        } else {
            for (int64_t j = 0; j < run; ++j) std::memcpy(out + (i + j) * p.elem_size, src + j * step, static_cast<size_t>(p.elem_size));
        }
        i += run;
    }
}

void concat_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ConcatParams*>(params);
    char* out = bytes(buffers, p.out);
    for (int64_t o = begin; o < end; ++o) {
        int64_t at = o * p.out_row;
        for (int32_t k = 0; k < p.count; ++k) {
            move_bytes(out + at * p.elem_size, bytes(buffers, p.parts[k]) + o * p.part_row[k] * p.elem_size,
                       p.part_row[k] * p.elem_size);
            at += p.part_row[k];
        }
    }
}

void split_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const SplitParams*>(params);
    const char* in = bytes(buffers, p.in);
    for (int64_t o = begin; o < end; ++o) {
        int64_t at = o * p.in_row;
        for (int32_t k = 0; k < p.count; ++k) {
            move_bytes(bytes(buffers, p.parts[k]) + o * p.part_row[k] * p.elem_size, in + at * p.elem_size,
                       p.part_row[k] * p.elem_size);
            at += p.part_row[k];
        }
    }
}

void slice_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const SliceParams*>(params);
    Dims start = p.static_start, step = p.static_step, in_strides{};
    if (p.starts >= 0) {
        for (int d = 0; d < p.rank; ++d) { start[d] = 0; step[d] = 1; }
        for (int64_t i = 0; i < p.count; ++i) {
            int64_t axis = p.axes >= 0 ? load_int(buffers[p.axes], p.index_type, i) : i;
            if (axis < 0) axis += p.rank;
            step[axis] = p.steps >= 0 ? load_int(buffers[p.steps], p.index_type, i) : 1;
            start[axis] = resolve_start(load_int(buffers[p.starts], p.index_type, i), p.in_dims[axis], step[axis]);
        }
    }
    int64_t s = 1;
    for (int d = p.rank - 1; d >= 0; --d) { in_strides[d] = s; s *= p.in_dims[d]; }
    const char* in = bytes(buffers, p.in);
    char* out = bytes(buffers, p.out);
    // With a unit innermost step, each output row continues one contiguous input run: move runs.
    const int last = p.rank - 1;
    const bool runs = p.rank > 0 && step[last] == 1;
    Dims c{};
    for (int64_t i = begin; i < end;) {
        unravel(i, p.out_dims, p.rank, &c);
        int64_t off = 0;
        for (int d = 0; d < p.rank; ++d) off += (start[d] + c[d] * step[d]) * in_strides[d];
        const int64_t n = runs ? std::min(end - i, p.out_dims[last] - c[last]) : 1;
        move_bytes(out + i * p.elem_size, in + off * p.elem_size, n * p.elem_size);
        i += n;
    }
}

void gather_any(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const GatherParams*>(params);
    const char* data = bytes(buffers, p.data);
    char* out = bytes(buffers, p.out);
    for (int64_t i = begin; i < end; ++i) {
        const int64_t inner = i % p.inner, j = (i / p.inner) % p.num_indices, o = i / (p.inner * p.num_indices);
        int64_t idx = load_int(buffers[p.indices], p.index_type, j);
        if (idx < 0) idx += p.axis_len;
        std::memcpy(out + i * p.elem_size, data + ((o * p.axis_len + idx) * p.inner + inner) * p.elem_size,
                    static_cast<size_t>(p.elem_size));
    }
}

// Ties keep the lower index first, as ONNX Runtime does.
void topk_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const TopKParams*>(params);
    const float* x = cf32(buffers, p.x);
    float* values = f32(buffers, p.values);
    auto* indices = p.indices >= 0 ? static_cast<int64_t*>(buffers[p.indices]) : nullptr;
    std::vector<int64_t> order(static_cast<size_t>(p.len));
    for (int64_t unit = begin; unit < end; ++unit) {
        const int64_t outer = unit / p.inner, inner = unit % p.inner;
        const float* line = x + outer * p.len * p.inner + inner;
        std::iota(order.begin(), order.end(), 0);
        auto better = [&](int64_t a, int64_t b) {
            const float va = line[a * p.inner], vb = line[b * p.inner];
            if (va != vb) return p.largest ? va > vb : va < vb;
            return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + p.k, order.end(), better);
        for (int64_t j = 0; j < p.k; ++j) {
            const int64_t at = outer * p.k * p.inner + j * p.inner + inner;
            values[at] = line[order[static_cast<size_t>(j)] * p.inner];
            if (indices != nullptr) indices[at] = order[static_cast<size_t>(j)];
        }
    }
}

void scatter_elements_f32(const void* params, void* const* buffers, int64_t begin, int64_t end) {
    const auto& p = *static_cast<const ScatterParams*>(params);
    if (begin >= end) return;
    const float* data = cf32(buffers, p.data);
    const float* upd = cf32(buffers, p.updates);
    float* out = f32(buffers, p.out);
    Dims strides{}, c{};
    int64_t total = 1, s = 1, n_upd = 1;
    for (int d = p.rank - 1; d >= 0; --d) { strides[d] = s; s *= p.data_dims[d]; }
    for (int d = 0; d < p.rank; ++d) { total *= p.data_dims[d]; n_upd *= p.upd_dims[d]; }
    std::memcpy(out, data, static_cast<size_t>(total) * sizeof(float));
    for (int64_t i = 0; i < n_upd; ++i) {
        unravel(i, p.upd_dims, p.rank, &c);
        int64_t idx = load_int(buffers[p.indices], p.index_type, i);
        if (idx < 0) idx += p.data_dims[p.axis];
        c[p.axis] = idx;
        float& dst = out[dot(c, strides, p.rank)];
        switch (p.reduction) {
            case 1: dst += upd[i]; break;
            case 2: dst *= upd[i]; break;
            case 3: dst = std::max(dst, upd[i]); break;
            case 4: dst = std::min(dst, upd[i]); break;
            default: dst = upd[i]; break;
        }
    }
}

}  // namespace hexfuse

// port.cpp: wire <-> plan conversions at a fused op's boundary, and the in-order runner.
#include "hexfuse/port.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

namespace hexfuse {
namespace {

int64_t element_size(WireType t) {
    switch (t) {
        case WireType::kU8: case WireType::kI8: case WireType::kBool: return 1;
        case WireType::kU16: case WireType::kI16: case WireType::kF16: return 2;
        case WireType::kF32: case WireType::kI32: return 4;
        case WireType::kI64: return 8;
    }
    return 0;
}

// The plan's types are the first members of WireType, in the same order.
WireType as_wire(DType t) { return static_cast<WireType>(static_cast<int32_t>(t)); }

bool is_integer(WireType t) { return t != WireType::kF32 && t != WireType::kF16; }

float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu, man = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {  // subnormal: renormalise
            int e = -1;
            uint32_t m = man;
            do { ++e; m <<= 1; } while ((m & 0x400u) == 0);
            bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3FFu) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | man << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | man << 13;
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

uint16_t float_to_half(float f) {  // round to nearest even
    uint32_t x;
    std::memcpy(&x, &f, sizeof x);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t abs = x & 0x7FFFFFFFu;
    if (abs >= 0x7F800000u) return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0u));
    if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
    if (abs < 0x38800000u) {  // subnormal half (or zero)
        const float scaled = std::fabs(f) * 16777216.0f;  // 2^24: one half-subnormal step = 1
        return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(scaled)));
    }
    const uint32_t rounded = abs + 0xFFFu + ((abs >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

int64_t load_raw(const void* p, WireType t, int64_t i) { return load_int(p, static_cast<DType>(t), i); }  // integer types only

template <typename Q>
void quantize(const float* src, Q* dst, int64_t n, float scale, int32_t offset, int64_t lo, int64_t hi) {
    for (int64_t i = 0; i < n; ++i) {
        double q = std::nearbyint(static_cast<double>(src[i]) / scale) + offset;  // ONNX: half to even
        if (!(q >= static_cast<double>(lo))) q = static_cast<double>(lo);  // NaN maps to lo
        if (q > static_cast<double>(hi)) q = static_cast<double>(hi);
        dst[i] = static_cast<Q>(q);
    }
}

void quantize_to(const float* src, const Wire& w) {
    switch (w.type) {
        case WireType::kU8: quantize(src, static_cast<uint8_t*>(w.data), w.count, w.scale, w.offset, 0, 255); break;
        case WireType::kI8: quantize(src, static_cast<int8_t*>(w.data), w.count, w.scale, w.offset, -128, 127); break;
        case WireType::kU16: quantize(src, static_cast<uint16_t*>(w.data), w.count, w.scale, w.offset, 0, 65535); break;
        case WireType::kI16: quantize(src, static_cast<int16_t*>(w.data), w.count, w.scale, w.offset, -32768, 32767); break;
        case WireType::kI32:
            quantize(src, static_cast<int32_t*>(w.data), w.count, w.scale, w.offset, INT32_MIN, INT32_MAX);
            break;
        default: break;
    }
}

// How a wire becomes a plan buffer: the same bytes, or a converted copy.
enum class Route { kAlias, kDequantize, kHalf, kWiden, kCodes, kBad };

Route route(DType plan, const PortQuant& q, const Wire& w) {
    if (plan == DType::kF32) {
        if (w.type == WireType::kF32 && !w.quantized) return Route::kAlias;
        if (w.type == WireType::kF16 && !w.quantized) return Route::kHalf;
        if (is_integer(w.type) && w.type != WireType::kI64 && w.type != WireType::kBool && w.quantized) return Route::kDequantize;
        return Route::kBad;
    }
    if (plan == DType::kI64) {
        if (w.type == WireType::kI64) return Route::kAlias;
        if (w.type == WireType::kI32) return Route::kWiden;
        return Route::kBad;
    }
    // Integer and bool ports carry their stored values: a quantized wire's raw bytes are the data.
    if (is_integer(w.type) && element_size(w.type) == element_size(as_wire(plan))) return Route::kAlias;
    // A codes port handed over as plain float32 (its DQ / Q left as ops of their own): the port's encoding
    // converts it, exactly as that DQ / Q would.
    if (q.quantized && w.type == WireType::kF32 && !w.quantized) return Route::kCodes;
    return Route::kBad;
}

}  // namespace

int run_in_order(const Plan& plan, const void* const* inputs, void* const* outputs) {
    std::vector<void*> buffers(static_cast<size_t>(plan.num_buffers), nullptr);
    for (int32_t i = 0; i < plan.num_inputs; ++i) buffers[i] = const_cast<void*>(inputs[i]);
    for (int32_t i = 0; i < plan.num_outputs; ++i) buffers[plan.num_inputs + i] = outputs[i];
    std::vector<std::unique_ptr<char[]>> blocks(static_cast<size_t>(plan.num_tasks));
    for (int32_t t = 0; t < plan.num_tasks; ++t) {
        const int64_t need = plan.tasks[t].scratch_bytes;
        if (need <= 0) continue;
        blocks[t].reset(new (std::nothrow) char[static_cast<size_t>(need) + 64]);
        if (!blocks[t]) return kBridgeNoMemory;
        const uintptr_t base = reinterpret_cast<uintptr_t>(blocks[t].get());
        char* aligned = reinterpret_cast<char*>((base + 63) & ~static_cast<uintptr_t>(63));
        for (int32_t s = 0; s < plan.num_scratch; ++s) {
            if (plan.scratch[s].task == t) buffers[plan.scratch[s].buffer] = aligned + plan.scratch[s].offset;
        }
    }
    for (int32_t i = 0; i < plan.num_ops; ++i) {
        const MicroOp& m = plan.ops[i];
        m.fn(m.params, buffers.data(), m.begin, m.end);
    }
    return kBridgeOk;
}

int run_bridged(const Plan& plan, const Wire* inputs, const Wire* outputs) {
    const int32_t ports = plan.num_inputs + plan.num_outputs;
    std::vector<std::unique_ptr<char[]>> copies(static_cast<size_t>(ports));
    std::vector<const void*> in(static_cast<size_t>(plan.num_inputs));
    std::vector<void*> out(static_cast<size_t>(plan.num_outputs));
    std::vector<Route> routes(static_cast<size_t>(ports));
    for (int32_t p = 0; p < ports; ++p) {
        const Wire& w = p < plan.num_inputs ? inputs[p] : outputs[p - plan.num_inputs];
        const DType type = static_cast<DType>(plan.port_types[p]);
        if (w.count != plan.port_counts[p]) return kBridgeBadCount;
        const PortQuant& q = plan.port_quant[p];
        routes[p] = route(type, q, w);
        if (routes[p] == Route::kBad) return kBridgeBadType;
        void* buffer = w.data;
        if (routes[p] != Route::kAlias) {
            copies[p].reset(new (std::nothrow) char[static_cast<size_t>(w.count * element_size(as_wire(type))) + 1]);
            if (!copies[p]) return kBridgeNoMemory;
            buffer = copies[p].get();
        }
        if (p < plan.num_inputs) {
            in[p] = buffer;
            switch (routes[p]) {
                case Route::kDequantize: {
                    float* dst = static_cast<float*>(buffer);
                    for (int64_t i = 0; i < w.count; ++i) dst[i] = w.scale * static_cast<float>(load_raw(w.data, w.type, i) - w.offset);
                    break;
                }
                case Route::kHalf: {
                    float* dst = static_cast<float*>(buffer);
                    for (int64_t i = 0; i < w.count; ++i) dst[i] = half_to_float(static_cast<const uint16_t*>(w.data)[i]);
                    break;
                }
                case Route::kWiden: {
                    int64_t* dst = static_cast<int64_t*>(buffer);
                    for (int64_t i = 0; i < w.count; ++i) dst[i] = static_cast<const int32_t*>(w.data)[i];
                    break;
                }
                case Route::kCodes:
                    quantize_to(static_cast<const float*>(w.data), Wire{buffer, as_wire(type), 1, q.scale, q.offset, w.count});
                    break;
                default: break;
            }
        } else {
            out[p - plan.num_inputs] = buffer;
        }
    }
    const int status = run_in_order(plan, in.data(), out.data());
    if (status != kBridgeOk) return status;
    for (int32_t o = 0; o < plan.num_outputs; ++o) {
        const int32_t p = plan.num_inputs + o;
        const Wire& w = outputs[o];
        switch (routes[p]) {
            case Route::kDequantize: quantize_to(static_cast<const float*>(out[o]), w); break;
            case Route::kHalf: {
                const float* src = static_cast<const float*>(out[o]);
                for (int64_t i = 0; i < w.count; ++i) static_cast<uint16_t*>(w.data)[i] = float_to_half(src[i]);
                break;
            }
            case Route::kWiden: {  // narrow back: int64 results that fit int32 (indices, shapes)
                const int64_t* src = static_cast<const int64_t*>(out[o]);
                for (int64_t i = 0; i < w.count; ++i) static_cast<int32_t*>(w.data)[i] = static_cast<int32_t>(src[i]);
                break;
            }
            case Route::kCodes: {
                const PortQuant& q = plan.port_quant[p];
                const DType type = static_cast<DType>(plan.port_types[p]);
                float* dst = static_cast<float*>(w.data);
                for (int64_t i = 0; i < w.count; ++i) dst[i] = q.scale * static_cast<float>(load_raw(out[o], as_wire(type), i) - q.offset);
                break;
            }
            default: break;
        }
    }
    return kBridgeOk;
}

}  // namespace hexfuse

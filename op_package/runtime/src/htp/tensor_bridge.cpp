// tensor_bridge.cpp: describe each HTP tensor as a hexfuse::Wire and run the plan through port.h.
//
// HTP core tensors are 4-D (QNN backfills lower ranks with leading 1s), so a dense flat tensor holds
// the ONNX tensor's elements in row-major order whatever its ONNX rank. Quantized tensors carry the
// scale and offset of the DQ/Q that the QNN EP folded into the port (real = scale * (q - offset)).
#include "htp/tensor_bridge.h"

#include <cstring>
#include <memory>
#include <vector>

#include "HTP/core/log.h"
#include "hexfuse/port.h"

namespace hexfuse_htp {
namespace {

constexpr unsigned kNotDense = Tensor::tformat_is_indirect | Tensor::tformat_is_chunked | Tensor::tformat_is_not_flat;

bool wire_type(::DType dtype, hexfuse::WireType* type, int32_t* quantized) {
    *quantized = 0;
    switch (dtype) {
        case ::DType::QUInt8: *type = hexfuse::WireType::kU8; *quantized = 1; return true;
        case ::DType::QInt8: *type = hexfuse::WireType::kI8; *quantized = 1; return true;
        case ::DType::QUInt16: *type = hexfuse::WireType::kU16; *quantized = 1; return true;
        case ::DType::QInt16: *type = hexfuse::WireType::kI16; *quantized = 1; return true;
        case ::DType::QInt32: *type = hexfuse::WireType::kI32; *quantized = 1; return true;
        case ::DType::Int32: *type = hexfuse::WireType::kI32; return true;
        case ::DType::Int64: *type = hexfuse::WireType::kI64; return true;
        case ::DType::Float32: *type = hexfuse::WireType::kF32; return true;
        case ::DType::Float16: *type = hexfuse::WireType::kF16; return true;
        default: return false;
    }
}

int64_t elements(const Tensor& t) {
    const auto [dims, rank] = t.get_dims();
    int64_t n = 1;
    for (size_t i = 0; i < rank; ++i) n *= static_cast<int64_t>(dims[i]);
    return n;
}

bool dense(const Tensor& t) { return (t.get_tensor_format_code() & kNotDense) == 0; }

// A non-dense tensor (e.g. crouton) of float plan data: read or written element by element.
template <typename Fn>
bool for_each_4d(const Tensor& t, Fn&& fn) {
    const auto [dims, rank] = t.get_dims();
    if (rank != 4) return false;
    int64_t i = 0;
    for (size_t b = 0; b < dims[0]; ++b)
        for (size_t h = 0; h < dims[1]; ++h)
            for (size_t w = 0; w < dims[2]; ++w)
                for (size_t d = 0; d < dims[3]; ++d) fn(i++, b, h, w, d);
    return true;
}

struct Staged {
    std::vector<hexfuse::Wire> wires;
    std::vector<std::unique_ptr<float[]>> copies;  // float copies of non-dense tensors
};

bool stage(const Tensor& t, bool plan_is_float, Staged* staged, hexfuse::Wire* wire) {
    const auto info = t.get_dtype_intfc();
    wire->count = elements(t);
    wire->scale = info.scale;
    wire->offset = info.offset;
    if (!wire_type(info.dtype, &wire->type, &wire->quantized)) return false;
    if (dense(t)) {
        wire->data = const_cast<void*>(t.raw_data_const());
        return true;
    }
    if (!plan_is_float) return false;  // integer data in a blocked layout: not expected for our ports
    staged->copies.emplace_back(new float[static_cast<size_t>(wire->count)]);
    float* copy = staged->copies.back().get();
    wire->data = copy;
    wire->type = hexfuse::WireType::kF32;
    wire->quantized = 0;
    return for_each_4d(t, [&](int64_t i, size_t b, size_t h, size_t w, size_t d) { copy[i] = t(b, h, w, d); });
}

int64_t element_bytes(hexfuse::WireType t) {
    switch (t) {
        case hexfuse::WireType::kU8: case hexfuse::WireType::kI8: case hexfuse::WireType::kBool: return 1;
        case hexfuse::WireType::kU16: case hexfuse::WireType::kI16: case hexfuse::WireType::kF16: return 2;
        case hexfuse::WireType::kF32: case hexfuse::WireType::kI32: return 4;
        case hexfuse::WireType::kI64: return 8;
    }
    return 0;
}

}  // namespace

GraphStatus copy_through(Tensor& out, const Tensor& in) {
    const auto info = in.get_dtype_intfc();
    hexfuse::WireType type;
    int32_t quantized;
    if (elements(out) != elements(in) || info.dtype != out.get_dtype_intfc().dtype) {
        errlog("hexfuse ordering op: output and input differ in size or type");
        return GraphStatus::ErrorFatal;
    }
    if (dense(in) && dense(out) && wire_type(info.dtype, &type, &quantized)) {
        std::memcpy(out.raw_data(), in.raw_data_const(), static_cast<size_t>(elements(in) * element_bytes(type)));
        return GraphStatus::Success;
    }
    if (!for_each_4d(in, [&](int64_t, size_t b, size_t h, size_t w, size_t d) { out(b, h, w, d) = static_cast<float>(in(b, h, w, d)); })) {
        errlog("hexfuse ordering op: a non-dense tensor that is not 4-D");
        return GraphStatus::ErrorFatal;
    }
    return GraphStatus::Success;
}

GraphStatus execute(const hexfuse::Plan& plan, Tensor* const* outputs, const Tensor* const* inputs) {
    Staged staged;
    std::vector<hexfuse::Wire> in(static_cast<size_t>(plan.num_inputs)), out(static_cast<size_t>(plan.num_outputs));
    for (int32_t i = 0; i < plan.num_inputs; ++i) {
        const bool is_float = plan.port_types[i] == static_cast<int32_t>(hexfuse::DType::kF32);
        if (!stage(*inputs[i], is_float, &staged, &in[i])) {
            errlog("hexfuse %s: input %d has a tensor type or layout the op cannot read", plan.op_type, (int)i);
            return GraphStatus::ErrorFatal;
        }
    }
    std::vector<int32_t> via_accessor(static_cast<size_t>(plan.num_outputs), 0);
    for (int32_t o = 0; o < plan.num_outputs; ++o) {
        const bool is_float = plan.port_types[plan.num_inputs + o] == static_cast<int32_t>(hexfuse::DType::kF32);
        via_accessor[o] = !dense(*outputs[o]);
        if (!stage(*outputs[o], is_float, &staged, &out[o])) {
            errlog("hexfuse %s: output %d has a tensor type or layout the op cannot write", plan.op_type, (int)o);
            return GraphStatus::ErrorFatal;
        }
    }
    const int status = hexfuse::run_bridged(plan, in.data(), out.data());
    if (status != hexfuse::kBridgeOk) {
        errlog("hexfuse %s: run failed with status %d", plan.op_type, status);
        return GraphStatus::ErrorFatal;
    }
    for (int32_t o = 0; o < plan.num_outputs; ++o) {
        if (!via_accessor[o]) continue;
        Tensor& t = *outputs[o];
        const float* values = static_cast<const float*>(out[o].data);
        for_each_4d(t, [&](int64_t i, size_t b, size_t h, size_t w, size_t d) { t(b, h, w, d) = values[i]; });
    }
    return GraphStatus::Success;
}

}  // namespace hexfuse_htp

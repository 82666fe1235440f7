// ort_ops.cpp: the fused ops of one package as ONNX Runtime custom ops on the CPU EP (domain "hexfuse").
//
//   ORT session ── Compute(ctx) ──> FusedKernel ── Executor::run(plan, in, out, serial) ──> lanes
//                                                                          matrix | vector | dma threads
//
// Each fused node runs its generated plan on the host executor: one entry per fused node, real threads
// per resource. The node's only attribute, int `serial`, is the barrier switch (1 = internal-serial,
// 0 = concurrent), so baselines 3 and 4 of DESIGN.md section 7 are the same model with the switch flipped.
// Built by op_package/ort_build.py against ONNX Runtime's C API headers; exports RegisterCustomOps only.
// With ORT_API_MANUAL_INIT the library asks the runtime for the headers' API version, which every newer
// runtime serves.
#define ORT_API_MANUAL_INIT
#include <onnxruntime_cxx_api.h>
#undef ORT_API_MANUAL_INIT

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hexfuse/executor.h"
#include "hexfuse/registry.h"
#include "ort_ops.h"

namespace {

using hexfuse::ort::OpInfo;
using hexfuse::ort::PortInfo;

constexpr const char* kDomain = "hexfuse";

// One executor (one set of lane threads) per process. It holds one run's state at a time, so runs are
// serialized here: two sessions (serial and concurrent variants) may share the library.
std::mutex g_run_mutex;

hexfuse::Executor& executor() {
    static hexfuse::Executor instance{hexfuse::LaneConfig{}};
    return instance;
}

std::string describe(int32_t elem_type, const int64_t* dims, size_t rank) {
    std::string out = "type " + std::to_string(elem_type) + " [";
    for (size_t i = 0; i < rank; ++i) out += (i ? "," : "") + std::to_string(dims[i]);
    return out + "]";
}

OrtStatus* error(OrtErrorCode code, const std::string& message) {
    return Ort::GetApi().CreateStatus(code, message.c_str());
}

class FusedKernel {
public:
    FusedKernel(const OpInfo& op, const hexfuse::Plan& plan, bool serial) : op_(op), plan_(plan), serial_(serial) {}

    OrtStatusPtr ComputeV2(OrtKernelContext* context) noexcept {
        try {
            return compute(context);
        } catch (const std::exception& e) {
            return error(ORT_FAIL, std::string("hexfuse ") + op_.op_type + ": " + e.what());
        }
    }

private:
    OrtStatusPtr compute(OrtKernelContext* context) {
        Ort::KernelContext ctx(context);
        if (ctx.GetInputCount() != static_cast<size_t>(op_.num_inputs)) {
            return error(ORT_INVALID_ARGUMENT, std::string(op_.op_type) + ": wrong input count");
        }
        std::vector<const void*> inputs(op_.num_inputs + 1, nullptr);
        for (int i = 0; i < op_.num_inputs; ++i) {
            Ort::ConstValue value = ctx.GetInput(i);
            Ort::TensorTypeAndShapeInfo info = value.GetTensorTypeAndShapeInfo();
            const PortInfo& want = op_.inputs[i];
            std::vector<int64_t> shape = info.GetShape();
            bool same = static_cast<int32_t>(info.GetElementType()) == want.elem_type &&
                        shape.size() == static_cast<size_t>(want.rank) &&
                        std::equal(shape.begin(), shape.end(), want.dims);
            if (!same) {  // the plan's kernels index with the spec's static shapes
                return error(ORT_INVALID_ARGUMENT,
                             std::string(op_.op_type) + " input " + std::to_string(i) + ": got " +
                                 describe(info.GetElementType(), shape.data(), shape.size()) + ", plan wants " +
                                 describe(want.elem_type, want.dims, want.rank));
            }
            inputs[i] = value.GetTensorRawData();
        }
        std::vector<void*> outputs(op_.num_outputs + 1, nullptr);
        for (int i = 0; i < op_.num_outputs; ++i) {
            const PortInfo& port = op_.outputs[i];
            Ort::UnownedValue value = ctx.GetOutput(i, port.dims, static_cast<size_t>(port.rank));
            outputs[i] = value.GetTensorMutableRawData();
        }
        int status;
        {
            std::lock_guard<std::mutex> lock(g_run_mutex);
            status = executor().run(plan_, inputs.data(), outputs.data(), serial_, nullptr);
        }
        if (status != hexfuse::kOk) {
            return error(ORT_FAIL, std::string(op_.op_type) + ": executor status " + std::to_string(status));
        }
        return nullptr;
    }

    const OpInfo& op_;
    const hexfuse::Plan& plan_;
    bool serial_;
};

class FusedOp : public Ort::CustomOpBase<FusedOp, FusedKernel, /*WithStatus=*/true> {
public:
    FusedOp(const OpInfo& op, const hexfuse::Plan& plan) : op_(op), plan_(plan) {}

    OrtStatusPtr CreateKernelV2(const OrtApi& api, const OrtKernelInfo* info, void** kernel) const noexcept {
        int64_t serial = 0;  // absent attribute = concurrent, as in the function's default
        OrtStatus* status = api.KernelInfoGetAttribute_int64(info, "serial", &serial);
        if (status != nullptr) api.ReleaseStatus(status);
        *kernel = new (std::nothrow) FusedKernel(op_, plan_, serial != 0);
        return *kernel != nullptr ? nullptr : error(ORT_FAIL, "out of memory");
    }

    const char* GetName() const { return op_.op_type; }
    const char* GetExecutionProviderType() const { return "CPUExecutionProvider"; }
    size_t GetInputTypeCount() const { return static_cast<size_t>(op_.num_inputs); }
    size_t GetOutputTypeCount() const { return static_cast<size_t>(op_.num_outputs); }
    ONNXTensorElementDataType GetInputType(size_t i) const {
        return static_cast<ONNXTensorElementDataType>(op_.inputs[i].elem_type);
    }
    ONNXTensorElementDataType GetOutputType(size_t i) const {
        return static_cast<ONNXTensorElementDataType>(op_.outputs[i].elem_type);
    }

private:
    const OpInfo& op_;
    const hexfuse::Plan& plan_;
};

// Ops live as long as the library; each registration gets its own domain object, kept alive here
// because sessions hold raw pointers to it.
std::mutex g_registry_mutex;
std::vector<std::unique_ptr<FusedOp>>& ops() {
    static std::vector<std::unique_ptr<FusedOp>> all;
    return all;
}
std::vector<Ort::CustomOpDomain>& domains() {
    static std::vector<Ort::CustomOpDomain> all;
    return all;
}

OrtStatus* build_ops() {
    if (!ops().empty()) return nullptr;
    // The registry lists the fused ops first (the op table's rows), then the task ops of their HTP expansion.
    if (hexfuse::ort::num_ops() > hexfuse::num_plans()) {
        return error(ORT_FAIL, "hexfuse: the op table has more rows than the plan registry (mixed builds?)");
    }
    for (int i = 0; i < hexfuse::ort::num_ops(); ++i) {
        const OpInfo* op = hexfuse::ort::op_at(i);
        const hexfuse::Plan* plan = hexfuse::plan_at(i);
        if (plan == nullptr || std::strcmp(plan->op_type, op->op_type) != 0 ||
            plan->num_inputs != op->num_inputs || plan->num_outputs != op->num_outputs) {
            return error(ORT_FAIL, std::string("hexfuse: op table row ") + std::to_string(i) +
                                       " does not match the plan registry (mixed builds?)");
        }
        bool seen = false;  // a spec may list one op type for several fused nodes: register it once
        for (const auto& known : ops()) seen = seen || std::strcmp(known->GetName(), op->op_type) == 0;
        if (!seen) ops().push_back(std::make_unique<FusedOp>(*op, *plan));
    }
    return nullptr;
}

}  // namespace

extern "C" ORT_EXPORT OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                                 const OrtApiBase* api_base) {
    const OrtApi* api = api_base->GetApi(ORT_API_VERSION);
    if (api == nullptr) return nullptr;  // the runtime is older than these headers: nothing we can report with
    Ort::InitApi(api);
    std::lock_guard<std::mutex> lock(g_registry_mutex);
    if (OrtStatus* status = build_ops()) return status;
    try {
        Ort::CustomOpDomain domain{kDomain};
        for (auto& op : ops()) domain.Add(op.get());
        Ort::UnownedSessionOptions(options).Add(domain);
        domains().push_back(std::move(domain));
    } catch (const std::exception& e) {
        return error(ORT_FAIL, std::string("hexfuse: registering custom ops failed: ") + e.what());
    }
    return nullptr;
}

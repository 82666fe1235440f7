// replace_helpers.h: replacement pieces the optimization grammar cannot spell. SDK glue.
//
// QNN's Conv2d translation reads pad_amount as a [2, 2] int32 constant (it is a $Const when the
// EP builds the op). The grammar's gen_ConstArr_vals_i32 only makes [1, 1, 1, n] arrays, and
// WITH_SIZE does not reshape a constant: so the [1, 1, 2, 2] constant is made here, the way the
// grammar's own gen_Shape makes its constants (graph_gen_Const_int32_common_wrapper).
//
// Prepare-only: optimization rules run when the graph is prepared (x86 or aarch64), never on the DSP.
// The Hexagon builds define PREPARE_DISABLED (Makefile), under which the SDK's optimize.h declares none
// of ReplFunc, Replacement or the graph_gen_* helpers and DEF_PACKAGE_OPTIMIZATION expands to nothing,
// so nothing here is referenced there (tests/op_package/test_device_compile.py keeps that true).
#pragma once

#include <cstdint>

#include "HTP/core/optimize.h"

#ifndef PREPARE_DISABLED

namespace hexfuse_htp {

// A [1, 1, 2, 2] int32 constant {a, b, c, d} (row-major), e.g. QNN's pad_amount {top, bottom, left, right}.
inline ReplFunc const_i32_2x2(int a, int b, int c, int d) {
    return ReplFunc::create([=](Replacement&, const OpDef& old) -> OpRef {
        OutputDef def = {4, DType::Int32, {1, 1, 2, 2}, 0, 1.0f};
        const int32_t data[4] = {a, b, c, d};
        return hnnx::graph_gen_Const_int32_common_wrapper(old.graph(), old, def,
                                                          reinterpret_cast<const unsigned char*>(data), sizeof data);
    });
}

}  // namespace hexfuse_htp

#endif  // PREPARE_DISABLED

// replace_helpers.h: replacement pieces the optimization grammar cannot spell. SDK glue.
//
// QNN's Conv2d translation reads pad_amount as a [2, 2] int32 constant (it is a $Const when the
// EP builds the op). The grammar's gen_ConstArr_vals_i32 only makes [1, 1, 1, n] arrays, and
// WITH_SIZE does not reshape a constant: so the [1, 1, 2, 2] constant is made here, the way the
// grammar's own gen_Shape makes its constants (graph_gen_Const_int32_common_wrapper).
#pragma once

#include <cstdint>

#include "HTP/core/optimize.h"

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

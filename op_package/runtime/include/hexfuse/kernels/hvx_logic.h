// hvx_logic.h: one-byte comparisons and boolean logic (uint8 / int8 / bool in, bool out) and Not.
// The op numbers are TypedOp's (logic.h); logic.cpp checks that with static_assert.
#pragma once

#include "hexfuse/kernels/hvx_common.h"

enum {
    HEXFUSE_HVX_EQ = 0, HEXFUSE_HVX_LT, HEXFUSE_HVX_GT, HEXFUSE_HVX_LE, HEXFUSE_HVX_GE,  // a ? b on bytes
    HEXFUSE_HVX_AND, HEXFUSE_HVX_OR, HEXFUSE_HVX_XOR,                                   // (a != 0) ? (b != 0)
    HEXFUSE_HVX_LOGIC_OPS
};

// out[i] = (a[i] op b[i]) ? 1 : 0 for dense rows; is_signed picks int8 over uint8 ordering.
// Returns 0 for an op outside [HEXFUSE_HVX_EQ, HEXFUSE_HVX_XOR].
HEXFUSE_HVX_API size_t hexfuse_hvx_compare_u8(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, int op,
                                              int is_signed);
// out[i] = in[i] ? 0 : 1
HEXFUSE_HVX_API size_t hexfuse_hvx_not_u8(uint8_t* out, const uint8_t* in, size_t n);

// hvx_logic.cpp: one-byte comparisons / boolean logic / Not, 128 bytes per vector. A predicate per
// lane is turned into the bool bytes 0 / 1 with one vmux.
#include "hexfuse/kernels/hvx_logic.h"

#ifdef __HVX__

namespace {

inline HVX_VectorPred nonzero(HVX_Vector v) { return Q6_Q_not_Q(Q6_Q_vcmp_eq_VbVb(v, Q6_V_vzero())); }

inline HVX_VectorPred greater(HVX_Vector a, HVX_Vector b, int is_signed) {
    return is_signed ? Q6_Q_vcmp_gt_VbVb(a, b) : Q6_Q_vcmp_gt_VubVub(a, b);
}

inline HVX_VectorPred compare(HVX_Vector a, HVX_Vector b, int op, int is_signed) {
    switch (op) {
        case HEXFUSE_HVX_EQ: return Q6_Q_vcmp_eq_VbVb(a, b);
        case HEXFUSE_HVX_LT: return greater(b, a, is_signed);
        case HEXFUSE_HVX_GT: return greater(a, b, is_signed);
        case HEXFUSE_HVX_LE: return Q6_Q_not_Q(greater(a, b, is_signed));
        case HEXFUSE_HVX_GE: return Q6_Q_not_Q(greater(b, a, is_signed));
        case HEXFUSE_HVX_AND: return Q6_Q_and_QQ(nonzero(a), nonzero(b));
        case HEXFUSE_HVX_OR: return Q6_Q_or_QQ(nonzero(a), nonzero(b));
        default: return Q6_Q_xor_QQ(nonzero(a), nonzero(b));
    }
}

}  // namespace

size_t hexfuse_hvx_compare_u8(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, int op, int is_signed) {
    if (op < HEXFUSE_HVX_EQ || op >= HEXFUSE_HVX_LOGIC_OPS) return 0;
    const size_t done = n - n % HEXFUSE_HVX_BYTES;
    const HVX_Vector one = Q6_Vb_vsplat_R(1), zero = Q6_V_vzero();
    for (size_t i = 0; i < done; i += HEXFUSE_HVX_BYTES) {
        const HVX_VectorPred q = compare(hexfuse_hvx_load(a + i), hexfuse_hvx_load(b + i), op, is_signed);
        hexfuse_hvx_store(out + i, Q6_V_vmux_QVV(q, one, zero));
    }
    return done;
}

size_t hexfuse_hvx_not_u8(uint8_t* out, const uint8_t* in, size_t n) {
    const size_t done = n - n % HEXFUSE_HVX_BYTES;
    const HVX_Vector one = Q6_Vb_vsplat_R(1), zero = Q6_V_vzero();
    for (size_t i = 0; i < done; i += HEXFUSE_HVX_BYTES) {
        hexfuse_hvx_store(out + i, Q6_V_vmux_QVV(Q6_Q_vcmp_eq_VbVb(hexfuse_hvx_load(in + i), zero), one, zero));
    }
    return done;
}

#endif  // __HVX__

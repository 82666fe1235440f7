// hvx_minmax.cpp: float32 Relu / Clip / Max / Min as 32-bit integer selects (see hvx_minmax.h for
// why the integer order key reproduces float `<` exactly). 32 floats per vector.
#include "hexfuse/kernels/hvx_minmax.h"

#ifdef __HVX__

namespace {

constexpr size_t kLanes = HEXFUSE_HVX_BYTES / sizeof(float);
constexpr int kMagMask = 0x7fffffff;
constexpr int kInfBits = 0x7f800000;

// Float bits decoded once per vector: the order key and the NaN lanes.
struct Keyed {
    HVX_Vector bits, key;
    HVX_VectorPred nan;
};

inline Keyed keyed(HVX_Vector bits) {
    const HVX_Vector zero = Q6_V_vzero();
    const HVX_Vector mag = Q6_V_vand_VV(bits, Q6_V_vsplat_R(kMagMask));
    const HVX_VectorPred neg = Q6_Q_vcmp_gt_VwVw(zero, bits);
    return {bits, Q6_V_vmux_QVV(neg, Q6_Vw_vsub_VwVw(zero, mag), mag),
            Q6_Q_vcmp_gt_VwVw(mag, Q6_V_vsplat_R(kInfBits))};
}

inline int float_bits(float f) {
    int i;
    __builtin_memcpy(&i, &f, sizeof i);
    return i;
}

inline bool is_nan_bits(int bits) { return (bits & kMagMask) > kInfBits; }

// Scalar operand splat in the same form.
inline Keyed keyed_scalar(float f) { return keyed(Q6_V_vsplat_R(float_bits(f))); }

// std::max(a, b) = (a < b) ? b : a;  std::min(a, b) = (b < a) ? b : a.
inline HVX_Vector select_minmax(const Keyed& a, const Keyed& b, int op) {
    const HVX_VectorPred less = op == HEXFUSE_HVX_MAX ? Q6_Q_vcmp_gt_VwVw(b.key, a.key)
                                                      : Q6_Q_vcmp_gt_VwVw(a.key, b.key);
    const HVX_VectorPred take_b = Q6_Q_and_QQn(Q6_Q_and_QQn(less, a.nan), b.nan);
    return Q6_V_vmux_QVV(take_b, b.bits, a.bits);
}

// Runs f(a_vec, b_vec) -> out_vec over all n floats: whole vectors in place, the ragged end through a
// zeroed stack vector, so every element gets the HVX semantics (see hvx_minmax.h on the scalar tail).
template <typename F>
size_t for_each_vector(float* out, const float* a, const float* b, size_t b_step, size_t n, F f) {
    const size_t whole = n - n % kLanes;
    for (size_t i = 0; i < whole; i += kLanes) {
        hexfuse_hvx_store(out + i, f(hexfuse_hvx_load(a + i), b_step ? hexfuse_hvx_load(b + i) : Q6_V_vzero()));
    }
    const size_t rest = n - whole;
    if (rest != 0) {
        HVX_Vector ta = Q6_V_vzero(), tb = Q6_V_vzero();
        __builtin_memcpy(&ta, a + whole, rest * sizeof(float));
        if (b_step) __builtin_memcpy(&tb, b + whole, rest * sizeof(float));
        const HVX_Vector r = f(ta, tb);
        __builtin_memcpy(out + whole, &r, rest * sizeof(float));
    }
    return n;
}

}  // namespace

size_t hexfuse_hvx_relu_f32(float* out, const float* in, size_t n) {
    const HVX_Vector zero = Q6_V_vzero();
    const HVX_Vector above_inf = Q6_V_vsplat_R(kInfBits + 1);
    return for_each_vector(out, in, nullptr, 0, n, [&](HVX_Vector v, HVX_Vector) {
        // x > 0.f holds exactly for bits in (0, +inf]: positive, not zero, not NaN.
        const HVX_VectorPred keep = Q6_Q_and_QQ(Q6_Q_vcmp_gt_VwVw(v, zero), Q6_Q_vcmp_gt_VwVw(above_inf, v));
        return Q6_V_vmux_QVV(keep, v, zero);
    });
}

size_t hexfuse_hvx_clip_f32(float* out, const float* in, size_t n, float lo, float hi) {
    if (is_nan_bits(float_bits(lo)) || is_nan_bits(float_bits(hi))) return 0;
    const Keyed l = keyed_scalar(lo), h = keyed_scalar(hi);
    return for_each_vector(out, in, nullptr, 0, n, [&](HVX_Vector v, HVX_Vector) {
        const Keyed x = keyed(v);
        // m = (x < lo) ? lo : x; a NaN x is never below, so m keeps it.
        const HVX_VectorPred below = Q6_Q_and_QQn(Q6_Q_vcmp_gt_VwVw(l.key, x.key), x.nan);
        const HVX_Vector m_bits = Q6_V_vmux_QVV(below, l.bits, x.bits);
        const HVX_Vector m_key = Q6_V_vmux_QVV(below, l.key, x.key);
        // (hi < m) ? hi : m; m is NaN exactly where x is.
        const HVX_VectorPred above = Q6_Q_and_QQn(Q6_Q_vcmp_gt_VwVw(m_key, h.key), x.nan);
        return Q6_V_vmux_QVV(above, h.bits, m_bits);
    });
}

size_t hexfuse_hvx_minmax_f32(float* out, const float* a, const float* b, size_t b_step, size_t n, int op) {
    if (b_step == 0) {
        const Keyed bv = keyed_scalar(b[0]);
        return for_each_vector(out, a, nullptr, 0, n,
                               [&](HVX_Vector va, HVX_Vector) { return select_minmax(keyed(va), bv, op); });
    }
    return for_each_vector(out, a, b, 1, n,
                           [&](HVX_Vector va, HVX_Vector vb) { return select_minmax(keyed(va), keyed(vb), op); });
}

#endif  // __HVX__

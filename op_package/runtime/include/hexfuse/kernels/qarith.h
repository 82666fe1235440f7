/* qarith.h: per-element integer arithmetic of the quantized kernels (qvector.h), written in C so that
 * the C++ kernels (src/kernels/qvector.cpp) and the freestanding HVX check
 * (tests/op_package/hexagon/hvx_check.c) share one definition: the HVX routines are compared against
 * exactly these functions.
 *
 * Fixed-point format: a requantized value is v / 2^shift with v an int32 (int64 for row means);
 * rounding is ONNX QuantizeLinear's half-to-even, done in integers:
 *     floor = v >> s;  rne = (v + 2^(s-1) - 1 + (floor & 1)) >> s
 * (a remainder below one half stays at floor, above one half reaches floor + 1, exactly one half adds
 * the parity bit: up from odd, down to even). Right shifts of negative values are arithmetic on every
 * compiler we build with (C++20 and C23 define them so).
 */
#ifndef HEXFUSE_KERNELS_QARITH_H
#define HEXFUSE_KERNELS_QARITH_H

#include <stdint.h>

enum { HEXFUSE_QADD = 0, HEXFUSE_QSUB = 1, HEXFUSE_QMUL = 2 };  /* = hexfuse::QBinaryOp */

/* Constants of one QBinary kernel (see qvector.h for the formulas and lower/qfixed.py for the bounds). */
struct hexfuse_qbinary {
    int32_t op, is_signed;
    int32_t a_zero, b_zero, out_zero;
    int32_t a_mult, b_mult, bias, shift;
};

static inline int32_t hexfuse_rne_shift(int32_t v, int32_t shift) {
    return (v + ((1 << (shift - 1)) - 1) + ((v >> shift) & 1)) >> shift;
}

static inline int64_t hexfuse_rne_shift64(int64_t v, int32_t shift) {
    return (v + (((int64_t)1 << (shift - 1)) - 1) + ((v >> shift) & 1)) >> shift;
}

static inline int32_t hexfuse_saturate8(int64_t v, int is_signed) {
    const int64_t lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
    return (int32_t)(v < lo ? lo : (v > hi ? hi : v));
}

/* One output code from two input codes (as integers: 0..255, or -128..127 when signed). */
static inline int32_t hexfuse_qbinary_one(const struct hexfuse_qbinary* p, int32_t a, int32_t b) {
    const int32_t v = p->op == HEXFUSE_QMUL ? p->a_mult * ((a - p->a_zero) * (b - p->b_zero))
                                            : p->a_mult * a + p->b_mult * b + p->bias;
    return hexfuse_saturate8((int64_t)hexfuse_rne_shift(v, p->shift) + p->out_zero, p->is_signed);
}

/* Loads code i of an 8-bit buffer as an integer. */
static inline int32_t hexfuse_code8(const uint8_t* p, int64_t i, int is_signed) {
    return is_signed ? (int32_t)(int8_t)p[i] : (int32_t)p[i];
}

/* The larger of two code bytes, compared as codes. */
static inline uint8_t hexfuse_max_code8(uint8_t a, uint8_t b, int is_signed) {
    return (is_signed ? (int8_t)a > (int8_t)b : a > b) ? a : b;
}

#endif /* HEXFUSE_KERNELS_QARITH_H */

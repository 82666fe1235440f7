// hvx_qvector.cpp: quantized lookup, requantizing Add / Sub / Mul, code maxima and byte sums, 128 codes
// per vector.
//
// Requantization lanes. Add / Sub need 22-bit multipliers (qfixed.py), so they run in word lanes: the
// 128 codes are widened twice (vunpack: linear order) to four word vectors, multiplied by the splatted
// multipliers (vmpyie: word x the unsigned low halfword, so int8 codes are first biased to unsigned by
// flipping the sign bit, which the constant term takes back), rounded, and packed back linearly:
//
//   128 x u8 --vunpack x2--> [w 0..31][w 32..63][w 64..95][w 96..127] --vmpyie(+acc), round-->
//   --vpack:sat--> [h 0..63][h 64..127] --+zero, vpack:sat--> 128 x u8
//
// Mul's product of two differences needs 17 bits and its multiplier 14, so it runs in halfword lanes:
// widened once, vmpy(h, h) leaves even lanes in the low word vector and odd lanes in the high one, and
// vsat(odd, even) re-interleaves them after rounding:
//
//   128 x u8 --vunpack--> [h 0..63][h 64..127] --(x - zero), vmpy--> per half [w even][w odd] --
//   --*m, round, vsat--> [h 0..63][h 64..127] --+zero, vpack:sat--> 128 x u8
#include "hexfuse/kernels/hvx_qvector.h"

#ifdef __HVX__

namespace {

constexpr size_t kBytes = HEXFUSE_HVX_BYTES;

inline HVX_Vector splat_byte(int32_t v) { return Q6_V_vsplat_R((v & 0xff) * 0x01010101); }
inline HVX_Vector splat_half(int32_t v) { return Q6_V_vsplat_R((v & 0xffff) * 0x00010001); }
inline int32_t both_halves(int32_t v) { return static_cast<int32_t>((static_cast<uint32_t>(v) & 0xffffu) * 0x00010001u); }

// Eight 32-entry lookups, each filling the bytes whose top three bits select its segment.
inline HVX_Vector lookup(HVX_Vector x, HVX_Vector t0, HVX_Vector t1) {
    HVX_Vector r = Q6_Vb_vlut32_VbVbR(x, t0, 0);
    r = Q6_Vb_vlut32or_VbVbVbR(r, x, t0, 1);
    r = Q6_Vb_vlut32or_VbVbVbR(r, x, t0, 2);
    r = Q6_Vb_vlut32or_VbVbVbR(r, x, t0, 3);
    r = Q6_Vb_vlut32or_VbVbVbR(r, x, t1, 4);
    r = Q6_Vb_vlut32or_VbVbVbR(r, x, t1, 5);
    r = Q6_Vb_vlut32or_VbVbVbR(r, x, t1, 6);
    return Q6_Vb_vlut32or_VbVbVbR(r, x, t1, 7);
}

// Splatted constants of one QBinary kernel.
struct Consts {
    int32_t shift, mult2;  // Mul: the multiplier in both halfwords of a register
    HVX_Vector a_mult, b_mult, a_zero, b_zero, bias, half_m1, one, out_zero;
};

// rne_shift of each word (qarith.h): floor parity first, then the biased shift.
inline HVX_Vector round_words(HVX_Vector v, const Consts& c) {
    v = Q6_Vw_vadd_VwVw(v, c.bias);
    const HVX_Vector parity = Q6_V_vand_VV(Q6_Vw_vasr_VwR(v, c.shift), c.one);
    return Q6_Vw_vasr_VwR(Q6_Vw_vadd_VwVw(Q6_Vw_vadd_VwVw(v, c.half_m1), parity), c.shift);
}

// Add / Sub of 32 codes each (unsigned, one per word's low halfword) -> 32 rounded words.
inline HVX_Vector add_words(HVX_Vector wa, HVX_Vector wb, const Consts& c) {
    return round_words(Q6_Vw_vmpyieacc_VwVwVuh(Q6_Vw_vmpyie_VwVuh(c.a_mult, wa), c.b_mult, wb), c);
}

// 64 codes as linear halfwords -> 64 saturated int16 results, linear.
inline HVX_Vector add_half(HVX_Vector ha, HVX_Vector hb, const Consts& c) {
    const HVX_VectorPair wa = Q6_Wuw_vunpack_Vuh(ha), wb = Q6_Wuw_vunpack_Vuh(hb);
    return Q6_Vh_vpack_VwVw_sat(add_words(Q6_V_hi_W(wa), Q6_V_hi_W(wb), c), add_words(Q6_V_lo_W(wa), Q6_V_lo_W(wb), c));
}

inline HVX_VectorPair widen(HVX_Vector x, int is_signed) {
    return is_signed ? Q6_Wh_vunpack_Vb(x) : Q6_Wuh_vunpack_Vub(x);
}

inline HVX_Vector mul_half(HVX_Vector ha, HVX_Vector hb, const Consts& c) {
    const HVX_VectorPair prod = Q6_Ww_vmpy_VhVh(Q6_Vh_vsub_VhVh(ha, c.a_zero), Q6_Vh_vsub_VhVh(hb, c.b_zero));
    const HVX_Vector even = round_words(Q6_Vw_vmpyi_VwRh(Q6_V_lo_W(prod), c.mult2), c);
    const HVX_Vector odd = round_words(Q6_Vw_vmpyi_VwRh(Q6_V_hi_W(prod), c.mult2), c);
    return Q6_Vh_vsat_VwVw(odd, even);
}

}  // namespace

size_t hexfuse_hvx_lookup_u8(uint8_t* out, const uint8_t* in, size_t n, const uint8_t* hvx_lut) {
    const size_t done = n - n % kBytes;
    const HVX_Vector t0 = hexfuse_hvx_load(hvx_lut), t1 = hexfuse_hvx_load(hvx_lut + kBytes);
    for (size_t i = 0; i < done; i += kBytes) hexfuse_hvx_store(out + i, lookup(hexfuse_hvx_load(in + i), t0, t1));
    return done;
}

size_t hexfuse_hvx_qbinary_8(uint8_t* out, const uint8_t* a, size_t a_step, const uint8_t* b, size_t b_step,
                             size_t n, const struct hexfuse_qbinary* p) {
    if (a_step > 1 || b_step > 1 || p->shift < 1 || p->shift > 31) return 0;
    const size_t done = n - n % kBytes;
    const int is_signed = p->is_signed, mul = p->op == HEXFUSE_QMUL;
    // Add / Sub read int8 codes biased by +128 (x ^ 0x80): a_mult * 128 + b_mult * 128 comes off the bias.
    const int32_t bias = mul ? 0 : p->bias - (is_signed ? 128 * (p->a_mult + p->b_mult) : 0);
    const Consts c{p->shift, both_halves(p->a_mult), Q6_V_vsplat_R(p->a_mult), Q6_V_vsplat_R(p->b_mult),
                   splat_half(p->a_zero), splat_half(p->b_zero), Q6_V_vsplat_R(bias),
                   Q6_V_vsplat_R((1 << (p->shift - 1)) - 1), Q6_V_vsplat_R(1), splat_half(p->out_zero)};
    const HVX_Vector flip = splat_byte(is_signed && !mul ? 0x80 : 0);
    const HVX_Vector a_splat = splat_byte(a[0]), b_splat = splat_byte(b[0]);
    for (size_t i = 0; i < done; i += kBytes) {
        HVX_Vector x = a_step ? hexfuse_hvx_load(a + i) : a_splat, y = b_step ? hexfuse_hvx_load(b + i) : b_splat;
        HVX_Vector lo, hi;
        if (mul) {
            const HVX_VectorPair wa = widen(x, is_signed), wb = widen(y, is_signed);
            lo = mul_half(Q6_V_lo_W(wa), Q6_V_lo_W(wb), c);
            hi = mul_half(Q6_V_hi_W(wa), Q6_V_hi_W(wb), c);
        } else {
            const HVX_VectorPair wa = Q6_Wuh_vunpack_Vub(Q6_V_vxor_VV(x, flip));
            const HVX_VectorPair wb = Q6_Wuh_vunpack_Vub(Q6_V_vxor_VV(y, flip));
            lo = add_half(Q6_V_lo_W(wa), Q6_V_lo_W(wb), c);
            hi = add_half(Q6_V_hi_W(wa), Q6_V_hi_W(wb), c);
        }
        lo = Q6_Vh_vadd_VhVh_sat(lo, c.out_zero);
        hi = Q6_Vh_vadd_VhVh_sat(hi, c.out_zero);
        hexfuse_hvx_store(out + i, is_signed ? Q6_Vb_vpack_VhVh_sat(hi, lo) : Q6_Vub_vpack_VhVh_sat(hi, lo));
    }
    return done;
}

size_t hexfuse_hvx_sum_8(const uint8_t* in, size_t n, int is_signed, int64_t* sum) {
    const size_t done = n - n % kBytes;
    if (done == 0) return 0;
    // int8 codes are summed as unsigned bytes with the sign bit flipped (x ^ 0x80 = x + 128), then
    // 128 per code is taken back. Each word lane adds 4 bytes per vector: exact below 2^22 vectors.
    const HVX_Vector flip = Q6_V_vsplat_R(is_signed ? static_cast<int32_t>(0x80808080u) : 0);
    HVX_Vector acc = Q6_V_vzero();
    for (size_t i = 0; i < done; i += kBytes) {
        acc = Q6_Vuw_vrmpyacc_VuwVubRub(acc, Q6_V_vxor_VV(hexfuse_hvx_load(in + i), flip), 0x01010101);
    }
    uint32_t lanes[kBytes / 4];
    __builtin_memcpy(lanes, &acc, sizeof lanes);
    int64_t total = 0;
    for (uint32_t lane : lanes) total += lane;
    *sum += total - (is_signed ? 128 * static_cast<int64_t>(done) : 0);
    return done;
}

namespace {

inline HVX_Vector max_codes(HVX_Vector a, HVX_Vector b, int is_signed) {
    return is_signed ? Q6_Vb_vmax_VbVb(a, b) : Q6_Vub_vmax_VubVub(a, b);
}

}  // namespace

size_t hexfuse_hvx_max_8(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, int is_signed) {
    const size_t done = n - n % kBytes;
    for (size_t i = 0; i < done; i += kBytes) {
        hexfuse_hvx_store(out + i, max_codes(hexfuse_hvx_load(a + i), hexfuse_hvx_load(b + i), is_signed));
    }
    return done;
}

size_t hexfuse_hvx_window_max_8(uint8_t* out, const uint8_t* in, size_t n, size_t taps, size_t step, int is_signed) {
    if (taps == 0) return 0;
    const size_t done = n - n % kBytes;
    for (size_t i = 0; i < done; i += kBytes) {  // one unaligned load per tap: the taps are byte shifts
        HVX_Vector m = hexfuse_hvx_load(in + i);
        for (size_t k = 1; k < taps; ++k) m = max_codes(m, hexfuse_hvx_load(in + i + k * step), is_signed);
        hexfuse_hvx_store(out + i, m);
    }
    return done;
}

#endif  // __HVX__

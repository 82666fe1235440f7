// hvx_qvector.h: HVX paths of the quantized vector kernels (qvector.h), integer HVX only (runs under
// qemu-hexagon at v67). Contract as hvx_common.h: each routine does the largest whole-vector prefix of
// its run and returns how many elements it did; the kernel's scalar loop (qarith.h) does the rest.
//
// Lookup table layout for vlut32 (computed at generation time, lower/qlut.py `vlut32_order`): in 128-byte
// mode `vlut32(idx, table, r)` returns, for every byte whose top three bits equal r, the table byte
//     table[64 * r[0] + 2 * (idx & 31) + r[1]]            (r[k] = bit k of r; zero for other bytes)
// so one 128-byte vector serves the four segments r = 0..3 and a second vector r = 4..7 (bit 2 of r
// picks the vector). Eight vlut32 / vlut32or steps cover all 256 codes:
//     hvx_lut[128 * r[2] + 64 * r[0] + 2 * j + r[1]] = lut[32 * r + j]        (j = 0..31)
#pragma once

#include "hexfuse/kernels/hvx_common.h"
#include "hexfuse/kernels/qarith.h"

// out[i] = lut[in[i]] for the whole-vector prefix; hvx_lut is the table in the vlut32 order above.
HEXFUSE_HVX_API size_t hexfuse_hvx_lookup_u8(uint8_t* out, const uint8_t* in, size_t n, const uint8_t* hvx_lut);

// out[i] = hexfuse_qbinary_one(p, a[i * a_step], b[i * b_step]) for the whole-vector prefix; a step of 0
// broadcasts element 0. Returns 0 (declines) for steps other than 0 / 1 or a shift outside [1, 31].
HEXFUSE_HVX_API size_t hexfuse_hvx_qbinary_8(uint8_t* out, const uint8_t* a, size_t a_step, const uint8_t* b,
                                             size_t b_step, size_t n, const struct hexfuse_qbinary* p);

// Adds the sum of the codes in[0, done) (int8 when is_signed) to *sum; done = the whole-vector prefix.
HEXFUSE_HVX_API size_t hexfuse_hvx_sum_8(const uint8_t* in, size_t n, int is_signed, int64_t* sum);

// out[i] = max(a[i], b[i]) over codes (int8 when is_signed), whole-vector prefix.
HEXFUSE_HVX_API size_t hexfuse_hvx_max_8(uint8_t* out, const uint8_t* a, const uint8_t* b, size_t n, int is_signed);

// out[i] = max over k < taps of in[i + k * step] (int8 when is_signed), whole-vector prefix: reads
// in[0, done - 1 + (taps - 1) * step]. Returns 0 for taps == 0.
HEXFUSE_HVX_API size_t hexfuse_hvx_window_max_8(uint8_t* out, const uint8_t* in, size_t n, size_t taps, size_t step,
                                                int is_signed);

/* hvx_check.c: runs every hexfuse_hvx_* routine against the scalar reference of its kernel on
 * deterministic pseudo-random inputs and exits non-zero on the first mismatch.
 *
 * Freestanding: no libc on the Hexagon side, so this file brings _start, the two Linux syscalls it needs
 * (write, exit_group; qemu-hexagon-static runs it as a Linux user process) and the mem* functions the
 * compiler may call. Build and run (tests/op_package/test_hvx.py does this):
 *
 *   clang-19 --target=hexagon-unknown-none-elf -mcpu=hexagonv67 -mhvx -mhvx-length=128b -ffreestanding \
 *       -nostdlib -fuse-ld=lld -O2 -I op_package/runtime/include hvx_check.c <hvx objects> -o hvx_check
 *   qemu-hexagon-static -cpu v67 ./hvx_check
 *
 * Each case mirrors the kernel's dispatch: done = hvx(prefix); scalar loop for [done, n). It checks
 *   - done is what the routine promises (the HVX path really ran): the whole-vector part of n for the
 *     byte routines, all of n for the float min/max family, 0 where a routine declines (NaN clip bounds);
 *   - the output equals the scalar reference bit for bit;
 *   - the guard bytes before and after the output are untouched (no write past n).
 * Lengths cover 0, below one vector, exact multiples and ragged ends; pointers are offset by 0..127
 * bytes so loads and stores are unaligned. The scalar references are the expressions of
 * elementwise.cpp (unary_f32 / binary_rows), logic.cpp (typed_rows / not_bool) and layout.cpp (memcpy).
 */
#include <stddef.h>
#include <stdint.h>

#include "hexfuse/kernels/hvx_copy.h"
#include "hexfuse/kernels/hvx_logic.h"
#include "hexfuse/kernels/hvx_minmax.h"

/* ---- freestanding runtime ------------------------------------------------------------------------ */

static long syscall3(long nr, long a0, long a1, long a2) {
    register long r0 __asm__("r0") = a0;
    register long r1 __asm__("r1") = a1;
    register long r2 __asm__("r2") = a2;
    register long r6 __asm__("r6") = nr;
    __asm__ volatile("trap0(#1)" : "+r"(r0) : "r"(r1), "r"(r2), "r"(r6) : "memory");
    return r0;
}

enum { kSysWrite = 64, kSysExitGroup = 94 };  /* asm-generic numbers, used by Hexagon Linux */

void* memcpy(void* dst, const void* src, size_t n) {
    unsigned char* d = dst;
    const unsigned char* s = src;
    while (n--) *d++ = *s++;
    return dst;
}

void* memmove(void* dst, const void* src, size_t n) {
    unsigned char* d = dst;
    const unsigned char* s = src;
    if (d < s) {
        while (n--) *d++ = *s++;
    } else {
        while (n--) d[n] = s[n];
    }
    return dst;
}

void* memset(void* dst, int c, size_t n) {
    unsigned char* d = dst;
    while (n--) *d++ = (unsigned char)c;
    return dst;
}

static void put(const char* s) {
    size_t n = 0;
    while (s[n]) ++n;
    syscall3(kSysWrite, 1, (long)s, (long)n);
}

static void put_u(uint32_t v) {  /* by subtraction: Hexagon has no divide instruction and no libgcc here */
    static const uint32_t kPow10[] = {1000000000u, 100000000u, 10000000u, 1000000u, 100000u, 10000u, 1000u, 100u, 10u, 1u};
    char buf[11];
    int len = 0;
    for (int k = 0; k < 10; ++k) {
        char d = '0';
        while (v >= kPow10[k]) { v -= kPow10[k]; ++d; }
        if (d != '0' || len > 0 || k == 9) buf[len++] = d;
    }
    buf[len] = 0;
    put(buf);
}

static void put_hex(uint32_t v) {
    char buf[11] = "0x";
    for (int i = 0; i < 8; ++i) buf[2 + i] = "0123456789abcdef"[(v >> (28 - 4 * i)) & 15];
    buf[10] = 0;
    put(buf);
}

/* ---- test data --------------------------------------------------------------------------------- */

static uint32_t rng_state = 0x9e3779b9u;

static uint32_t rnd(void) {  /* xorshift32: deterministic across runs and hosts */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* Floats where float order, -0 / +0 and NaN handling differ from naive integer order. */
static const uint32_t kSpecial[] = {
    0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,  /* +0 -0 +inf -inf */
    0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u,  /* quiet / signalling NaN, both signs */
    0x7fffffffu, 0xffffffffu, 0x00000001u, 0x80000001u,  /* largest-payload NaN, smallest denormals */
    0x007fffffu, 0x807fffffu, 0x7f7fffffu, 0xff7fffffu,  /* largest denormals, largest finite */
    0x3f800000u, 0xbf800000u, 0x3f000000u, 0xbf000000u,  /* +-1, +-0.5 */
};
enum { kSpecials = sizeof kSpecial / sizeof kSpecial[0] };

static uint32_t rnd_float_bits(void) {
    const uint32_t r = rnd();
    switch (r & 3u) {
        case 0: return kSpecial[(r >> 2) % kSpecials];
        case 1: return rnd();                                          /* any bit pattern */
        default: return (r & 0x80000000u) | (0x3e000000u + ((r >> 2) & 0x01ffffffu));  /* ~[0.125, 2) */
    }
}

/* Reinterpreting float buffers as bits is done through memcpy-free unions of arrays. */
enum { kMax = 4096, kGuard = 256, kPad = kGuard + 128 };
static union { uint8_t b[kMax * 4 + 2 * kPad]; float f[(kMax * 4 + 2 * kPad) / 4]; }
    in_a __attribute__((aligned(128))), in_b __attribute__((aligned(128))),
    out_ref __attribute__((aligned(128))), out_hvx __attribute__((aligned(128)));

static const uint32_t kLengths[] = {0, 1, 7, 31, 32, 33, 100, 127, 128, 129, 255, 256, 257, 1000, 1023, 4096};
enum { kNumLengths = sizeof kLengths / sizeof kLengths[0] };
static const uint32_t kOffsets[] = {0, 1, 2, 3, 4, 60, 64, 127};  /* bytes; floats use the multiples of 4 */
enum { kNumOffsets = sizeof kOffsets / sizeof kOffsets[0] };

static uint32_t cases, failures;

static void fail(const char* what, uint32_t n, uint32_t off, uint32_t at, uint32_t got, uint32_t want) {
    if (failures++ < 20) {
        put("MISMATCH "); put(what); put(" n="); put_u(n); put(" off="); put_u(off); put(" at="); put_u(at);
        put(" got="); put_hex(got); put(" want="); put_hex(want); put("\n");
    }
}

/* Compares out_hvx with out_ref over [0, bytes + 2 * kGuard) around the output window. */
static void check_bytes(const char* what, uint32_t n, uint32_t off, uint32_t elem, size_t done, size_t want_done) {
    const uint32_t shift = elem == 4 ? 2 : 0;
    ++cases;
    if (done != want_done) {
        fail(what, n, off, 0xffffffffu, (uint32_t)done, (uint32_t)want_done);
        return;
    }
    const uint32_t begin = kPad + off - kGuard, end = kPad + off + n * elem + kGuard;
    for (uint32_t i = begin; i < end; ++i) {
        if (out_hvx.b[i] != out_ref.b[i]) {
            const uint32_t at = i < kPad + off ? i : (i - kPad - off) >> shift;
            const uint32_t w = ((i - kPad - off) >> shift << shift) + kPad + off;
            if (elem == 4 && i >= kPad + off && i < kPad + off + n * 4) {
                uint32_t got, want;
                memcpy(&got, out_hvx.b + w, 4);
                memcpy(&want, out_ref.b + w, 4);
                fail(what, n, off, at, got, want);
            } else {
                fail(what, n, off, at, out_hvx.b[i], out_ref.b[i]);
            }
            return;
        }
    }
}

static void fill_outputs(void) {
    for (uint32_t i = 0; i < sizeof out_ref.b; ++i) out_ref.b[i] = out_hvx.b[i] = 0xa5;
}

static uint32_t whole(uint32_t n, uint32_t per_vector) { return n & ~(per_vector - 1u); }  /* per_vector: power of 2 */

/* ---- scalar references (the kernels' expressions) ------------------------------------------------ */

/* The comparison result goes through an empty asm so the compiler cannot fuse compare + select into
 * Hexagon sfmax / sfmin (which ignore NaN and order -0 below +0): the reference keeps the C semantics
 * that the host build of the kernel has. */
static float pick(int cond, float if_true, float if_false) {
    __asm__("" : "+r"(cond));
    return cond ? if_true : if_false;
}
static float ref_relu(float x) { return pick(x > 0.f, x, 0.f); }
static float ref_max(float a, float b) { return pick(a < b, b, a); }  /* std::max */
static float ref_min(float a, float b) { return pick(b < a, b, a); }  /* std::min */
static float ref_clip(float x, float lo, float hi) { return ref_min(ref_max(x, lo), hi); }

static uint8_t ref_compare(int op, int is_signed, uint8_t ua, uint8_t ub) {
    const int x = is_signed ? (int8_t)ua : ua, y = is_signed ? (int8_t)ub : ub;
    switch (op) {
        case HEXFUSE_HVX_EQ: return x == y;
        case HEXFUSE_HVX_LT: return x < y;
        case HEXFUSE_HVX_GT: return x > y;
        case HEXFUSE_HVX_LE: return x <= y;
        case HEXFUSE_HVX_GE: return x >= y;
        case HEXFUSE_HVX_AND: return (x != 0) && (y != 0);
        case HEXFUSE_HVX_OR: return (x != 0) || (y != 0);
        default: return (x != 0) != (y != 0);
    }
}

/* ---- cases ---------------------------------------------------------------------------------------- */

static void fill_float_inputs(uint32_t n, uint32_t off) {
    float* a = (float*)(in_a.b + kPad + off);
    float* b = (float*)(in_b.b + kPad + off);
    for (uint32_t i = 0; i < n; ++i) {
        uint32_t x = rnd_float_bits(), y;
        switch (rnd() % 4) {  /* equal and sign-flipped pairs hit the tie rules (-0 vs +0, NaN vs NaN) */
            case 0: y = x; break;
            case 1: y = x ^ 0x80000000u; break;
            default: y = rnd_float_bits(); break;
        }
        memcpy(a + i, &x, 4);
        memcpy(b + i, &y, 4);
    }
}

static void check_float_ops(void) {
    static const uint32_t kBounds[][2] = {
        {0x00000000u, 0x40c00000u}, {0x80000000u, 0x00000000u}, {0xbf800000u, 0x3f800000u},  /* [0,6] [-0,0] [-1,1] */
        {0xff800000u, 0x7f800000u}, {0x3f800000u, 0xbf800000u}, {0x00000001u, 0x80000001u},  /* lo > hi cases too */
        {0x7fc00000u, 0x3f800000u}, {0x00000000u, 0xffc00000u},                              /* NaN bound: declined */
    };
    for (uint32_t li = 0; li < kNumLengths; ++li) {
        for (uint32_t oi = 0; oi < kNumOffsets; ++oi) {
            const uint32_t n = kLengths[li], off = kOffsets[oi] & ~3u;
            fill_float_inputs(n, off);
            const float* a = (const float*)(in_a.b + kPad + off);
            const float* b = (const float*)(in_b.b + kPad + off);
            float* ref = (float*)(out_ref.b + kPad + off);
            float* got = (float*)(out_hvx.b + kPad + off);
            size_t done;

            fill_outputs();
            for (uint32_t i = 0; i < n; ++i) ref[i] = ref_relu(a[i]);
            done = hexfuse_hvx_relu_f32(got, a, n);
            for (size_t i = done; i < n; ++i) got[i] = ref_relu(a[i]);
            check_bytes("relu_f32", n, off, 4, done, n);

            for (uint32_t k = 0; k < sizeof kBounds / sizeof kBounds[0]; ++k) {
                float lo, hi;
                memcpy(&lo, &kBounds[k][0], 4);
                memcpy(&hi, &kBounds[k][1], 4);
                const int nan_bound = lo != lo || hi != hi;
                fill_outputs();
                for (uint32_t i = 0; i < n; ++i) ref[i] = ref_clip(a[i], lo, hi);
                done = hexfuse_hvx_clip_f32(got, a, n, lo, hi);
                for (size_t i = done; i < n; ++i) got[i] = ref_clip(a[i], lo, hi);
                check_bytes("clip_f32", n, off, 4, done, nan_bound ? 0 : n);
            }

            for (int op = HEXFUSE_HVX_MAX; op <= HEXFUSE_HVX_MIN; ++op) {
                for (size_t b_step = 0; b_step <= 1; ++b_step) {
                    const char* what = op == HEXFUSE_HVX_MAX ? (b_step ? "max_f32" : "max_f32_scalar_b")
                                                             : (b_step ? "min_f32" : "min_f32_scalar_b");
                    /* the broadcast operand walks through the specials as well */
                    const float* bb = b_step ? b : (const float*)(in_b.b + kPad + off + 4 * (n > 0 ? (n - 1) / 2 : 0));
                    fill_outputs();
                    for (uint32_t i = 0; i < n; ++i) {
                        const float y = bb[i * b_step];
                        ref[i] = op == HEXFUSE_HVX_MAX ? ref_max(a[i], y) : ref_min(a[i], y);
                    }
                    done = hexfuse_hvx_minmax_f32(got, a, bb, b_step, n, op);
                    for (size_t i = done; i < n; ++i) {
                        const float y = bb[i * b_step];
                        got[i] = op == HEXFUSE_HVX_MAX ? ref_max(a[i], y) : ref_min(a[i], y);
                    }
                    check_bytes(what, n, off, 4, done, n);
                }
            }
        }
    }
}

static void check_byte_ops(void) {
    static const char* const kNames[] = {"eq", "lt", "gt", "le", "ge", "and", "or", "xor"};
    for (uint32_t li = 0; li < kNumLengths; ++li) {
        for (uint32_t oi = 0; oi < kNumOffsets; ++oi) {
            const uint32_t n = kLengths[li], off = kOffsets[oi];
            const uint32_t off_src = kOffsets[(oi + 3) % kNumOffsets];  /* source and destination misaligned differently */
            uint8_t* a = in_a.b + kPad + off_src;
            uint8_t* b = in_b.b + kPad + off_src;
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t r = rnd();
                a[i] = (uint8_t)r;
                /* ties, bools and the signed / unsigned boundary (0x7f / 0x80) on purpose */
                switch ((r >> 8) & 7u) {
                    case 0: b[i] = a[i]; break;
                    case 1: a[i] &= 1u; b[i] = (uint8_t)((r >> 16) & 1u); break;
                    case 2: b[i] = (uint8_t)(a[i] ^ 0x80u); break;
                    case 3: b[i] = 0; break;
                    default: b[i] = (uint8_t)(r >> 16); break;
                }
            }
            uint8_t* ref = out_ref.b + kPad + off;
            uint8_t* got = out_hvx.b + kPad + off;
            size_t done;

            fill_outputs();
            for (uint32_t i = 0; i < n; ++i) ref[i] = a[i];
            done = hexfuse_hvx_copy_bytes(got, a, n);
            memcpy(got + done, a + done, n - done);
            check_bytes("copy_bytes", n, off, 1, done, whole(n, 128));

            fill_outputs();
            for (uint32_t i = 0; i < n; ++i) ref[i] = a[i] ? 0 : 1;
            done = hexfuse_hvx_not_u8(got, a, n);
            for (size_t i = done; i < n; ++i) got[i] = a[i] ? 0 : 1;
            check_bytes("not_u8", n, off, 1, done, whole(n, 128));

            for (int is_signed = 0; is_signed <= 1; ++is_signed) {
                for (int op = HEXFUSE_HVX_EQ; op < HEXFUSE_HVX_LOGIC_OPS; ++op) {
                    fill_outputs();
                    for (uint32_t i = 0; i < n; ++i) ref[i] = ref_compare(op, is_signed, a[i], b[i]);
                    done = hexfuse_hvx_compare_u8(got, a, b, n, op, is_signed);
                    for (size_t i = done; i < n; ++i) got[i] = ref_compare(op, is_signed, a[i], b[i]);
                    check_bytes(kNames[op], n, off, 1, done, whole(n, 128));
                }
            }
            ++cases;  /* an op number outside the table is declined, not guessed */
            if (hexfuse_hvx_compare_u8(got, a, b, n, HEXFUSE_HVX_LOGIC_OPS, 0) != 0) fail("bad_op", n, off, 0, 1, 0);
        }
    }
}

int main(void) {
    check_float_ops();
    check_byte_ops();
    put("hvx_check: "); put_u(cases); put(" cases, "); put_u(failures); put(" mismatches\n");
    return failures ? 1 : 0;
}

void _start(void) {
    syscall3(kSysExitGroup, main(), 0, 0);
    for (;;) {
    }
}

// hvx_common.h: shared vocabulary of the HVX kernel paths (src/kernels/hvx/, Hexagon builds only).
//
// Contract of every hexfuse_hvx_* routine (C linkage, so the freestanding qemu driver in
// tests/op_package/hexagon/ calls them from C):
//
//   done = hexfuse_hvx_<op>(out, in..., n, ...);     // 0 <= done <= n
//   for (i = done; i < n; ++i) out[i] = <scalar reference>;   // the kernel's own loop finishes
//
// The scalar loop stays the semantic definition (as compiled for the host). Byte routines handle the
// largest prefix of whole 128-byte vectors and leave the ragged end to the scalar loop; the float
// min/max family does all n (hvx_minmax.h says why). No routine reads or writes past element n. A routine
// returns 0 when it cannot match the scalar result for the given arguments (e.g. NaN clip bounds); the
// scalar loop then does everything. Loads and stores are
// unaligned (vmemu): buffers and row starts carry no alignment promise.
//
// Only integer HVX is used, so the paths run on every HVX version and under qemu-hexagon (v67).
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __HVX__
#if __HVX_LENGTH__ != 128
#error "hexfuse HVX paths assume 128-byte vectors (-mhvx-length=128b)"
#endif
#include <hexagon_types.h>
#include <hvx_hexagon_protos.h>

#define HEXFUSE_HVX_BYTES 128

// Any byte alignment, and allowed to alias the float / byte buffers it reads.
typedef long hexfuse_hvx_uvec __attribute__((__vector_size__(128), __aligned__(1), __may_alias__));

static inline HVX_Vector hexfuse_hvx_load(const void* p) { return *(const hexfuse_hvx_uvec*)p; }
static inline void hexfuse_hvx_store(void* p, HVX_Vector v) { *(hexfuse_hvx_uvec*)p = v; }
#endif  // __HVX__

#ifdef __cplusplus
#define HEXFUSE_HVX_API extern "C"
#else
#define HEXFUSE_HVX_API
#endif

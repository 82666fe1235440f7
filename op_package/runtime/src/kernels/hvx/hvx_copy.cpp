// hvx_copy.cpp: whole-vector byte copy with unaligned vmemu loads and stores.
#include "hexfuse/kernels/hvx_copy.h"

#ifdef __HVX__

size_t hexfuse_hvx_copy_bytes(void* dst, const void* src, size_t n) {
    const size_t done = n - n % HEXFUSE_HVX_BYTES;
    uint8_t* d = (uint8_t*)dst;
    const uint8_t* s = (const uint8_t*)src;
    for (size_t i = 0; i < done; i += HEXFUSE_HVX_BYTES) hexfuse_hvx_store(d + i, hexfuse_hvx_load(s + i));
    return done;
}

#endif  // __HVX__

// hvx_copy.h: byte moves of the DMA-lane kernels (copy, contiguous Transpose/Expand runs, Concat, Split).
#pragma once

#include "hexfuse/kernels/hvx_common.h"

// Copies the first n - n % 128 bytes of src to dst (no overlap, as memcpy); returns that count.
HEXFUSE_HVX_API size_t hexfuse_hvx_copy_bytes(void* dst, const void* src, size_t n);

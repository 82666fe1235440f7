// tensor_bridge.h: HTP core tensors -> hexfuse ports (port.h). SDK glue, shared by every op of the
// package; compiled only by the SDK targets of the Makefile.
#pragma once

#include "HTP/core/graph_status.h"
#include "HTP/core/tensor.h"
#include "hexfuse/task.h"

namespace hexfuse_htp {

// Runs one fused op's plan on the HTP tensors QNN handed to the op (outputs first, as HTP orders
// them). Dense flat tensors are used in place or converted once (quantized, fp16, int32-for-int64);
// any other layout goes through HTP's generic element accessor.
GraphStatus execute(const hexfuse::Plan& plan, Tensor* const* outputs, const Tensor* const* inputs);

// The kernel of the entry and join ops (htp_expand.py): `out` becomes a copy of `in`, which has its
// size and type; the op's other inputs are only there to order it. Bytes where both are dense,
// element by element otherwise.
GraphStatus copy_through(Tensor& out, const Tensor& in);

}  // namespace hexfuse_htp

"""What combining a chain saves, estimated from the target's figures (no QNN schedule).

Per matrix op (MatMul, Gemm, Conv) on a weight of W bytes, rows r_1..r_N of the N requests, K x M MACs per row:

    apart     sum_i max(W / DDR, pad(r_i) K M / HMX)     each request reads the weight again
    combined  max(W / DDR, pad(sum_i r_i) K M / HMX)     read once; rows padded to HMX tiles once

DDR is the bandwidth the NPU sustains (ddr_gbps x ddr_npu_fraction), HMX the MAC rate of the weight's
precision, pad() rounds up to the HMX tile (32 rows: 128 prefill rows + 1 decode row pad to 160). Every
other op is one launch instead of N (dispatch_ns each); each Concat, Split and the Dequantize/Quantize
around them is one more launch and moves its bytes through DDR twice. The chain is combined where the
estimate saves time; its saving is a *work reduction* (weights read once, fewer launches), reported apart
from overlap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx

from hexfuse.graph_passes.combine.plan import Chain, Plan, constant_sources
from hexfuse.graph_passes.cost.target import Target

MATRIX = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose"})
_FLOATS = frozenset({onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16,
                     onnx.TensorProto.DOUBLE})


@dataclass(frozen=True)
class Priced:
    apart_ns: float  # the chain's ops, each request on its own
    combined_ns: float  # the chain as one, with its Concat / Split
    weight_bytes_apart: int  # weight bytes read from DDR, each request reading its own
    weight_bytes_combined: int
    rows: tuple[int, ...]  # rows of the chain's largest matrix op, per request
    padded_rows: tuple[int, int]  # HMX rows that op computes: apart (summed), combined
    added_ops: int  # Concat, Split and the QDQ around them

    @property
    def saving_ns(self) -> float:
        return self.apart_ns - self.combined_ns

    @property
    def pays(self) -> bool:
        return self.saving_ns > 0


def _pad(rows: int, tile: int) -> int:
    return math.ceil(rows / tile) * tile


def _elements(shape: tuple[int, ...] | None) -> int:
    return int(np.prod(shape)) if shape else 0


def _matrix_terms(plan: Plan, number: int, weights_memo: dict) -> tuple[int, int, tuple[int, ...]]:
    """(weight bytes, MACs per row, rows per request) of a matrix tuple."""
    view = plan.view
    members = plan.counterparts.tuples[number]
    first = view.nodes[members[0]]
    weight = first.input[1]
    shape = view.shape(weight) or ()
    activation = [view.nodes[m].input[0] for m in members]
    if first.op_type in ("Conv", "ConvTranspose"):  # rows: output positions of every image in the batch
        outputs = [view.shape(view.nodes[m].output[0]) or (1, 1) for m in members]
        per_row = _elements(shape)
        rows = tuple(out[0] * _elements(out[2:]) for out in outputs)
    else:
        per_row = _elements(shape)
        rows = tuple(_elements((view.shape(t) or (1,))[:-1]) for t in activation)
    sources = constant_sources(view, weight, weights_memo) if weight in view.constant else frozenset()
    return sum(view.weight_bytes[s] for s in sources), per_row, rows


def price_chain(plan: Plan, chain: Chain, target: Target, added_ops: int) -> Priced:
    view = plan.view
    ddr = target.ddr_bytes_per_ns
    tile = int(target.hmx_tile)
    apart = combined = 0.0
    bytes_apart = bytes_combined = 0
    memo: dict = {}
    largest: tuple[int, tuple[int, ...]] = (-1, ())
    for number in chain.tuples:
        members = plan.counterparts.tuples[number]
        first = view.nodes[members[0]]
        if first.op_type in MATRIX and len(first.input) > 1 and first.input[1] in view.constant:
            weight, per_row, rows = _matrix_terms(plan, number, memo)
            float_weight = view.elem_type(first.input[1]) in _FLOATS
            macs = (target.hmx_fp16_macs_per_cycle if float_weight else target.hmx_int8_macs_per_cycle) * target.clock_ghz
            apart += sum(max(weight / ddr, _pad(r, tile) * per_row / macs) for r in rows) + len(rows) * target.dispatch_ns
            combined += max(weight / ddr, _pad(sum(rows), tile) * per_row / macs) + target.dispatch_ns
            bytes_apart += weight * len(rows)
            bytes_combined += weight
            if per_row * sum(rows) > largest[0]:
                largest = (per_row * sum(rows), rows)
        else:
            apart += len(members) * target.dispatch_ns
            combined += target.dispatch_ns
    moved = sum(_elements(view.shape(t)) * _itemsize(view.elem_type(t)) for tensors in (*chain.entries, *chain.exits)
                for t in tensors)
    combined += added_ops * target.dispatch_ns + 2 * moved / ddr
    rows = largest[1]
    padded = (sum(_pad(r, tile) for r in rows), _pad(sum(rows), tile)) if rows else (0, 0)
    return Priced(apart, combined, bytes_apart, bytes_combined, rows, padded, added_ops)


def _itemsize(elem_type: int) -> int:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except (KeyError, TypeError, ValueError):
        return 4

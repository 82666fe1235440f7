"""Fixed-point constants of the integer requantization kernels (qvector.h, qarith.h), with their bounds.

A real ratio r (scale_in / scale_out, ...) becomes an integer multiplier m = round(r * 2^shift): the
kernel computes v = m * (integer expression) and rounds v / 2^shift half to even. The shift is the
largest that keeps m within the multiplier's bit budget, capped so that every intermediate fits the
kernel's word size. The error of an output that does not saturate is then at most 255 / 2^(shift + 1)
per operand in LSB: ~0.0001 for Add / Sub (21-bit multipliers), ~0.015 for Mul (14-bit). An exact tie of the real result stays a tie when r is a dyadic fraction that fits
(equal scales, halves, ...), so the half-to-even rule then matches ONNX exactly.

Bounds (8-bit codes, |code - zero| <= 255):
  Add / Sub  |m| <= 2^21 - 1, shift <= 24: |m*a|, |m*a + m*b| and |v| stay below 2 * 2^21 * 255 < 2^30 and
             the HVX bias (int8 codes biased by 128) below 2^31  -> int32 word lanes
  Mul        m <= 2^14 - 1, shift <= 24: |m * (a - za)(b - zb)| <= 16383 * 65025 < 2^30  -> int32 (the HVX
             product of the two differences is a halfword x halfword multiply)
  row mean   m < 2^24, shift <= 62, int64: |(sum - n*z) * m| <= 255 n 2^24 < 2^63 for n < 2^31
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ADD_MULT_MAX = (1 << 21) - 1
MUL_MULT_MAX = (1 << 14) - 1
MEAN_MULT_MAX = (1 << 24) - 1
SHIFT_MAX_32 = 24
SHIFT_MAX_64 = 62


@dataclass(frozen=True)
class Binary:
    a_mult: int
    b_mult: int
    shift: int


def _shift_for(ratio: float, mult_max: int, shift_max: int) -> int:
    """Largest shift with round(ratio * 2^shift) <= mult_max (ratio > 0), at most shift_max; may be < 1."""
    shift = math.floor(math.log2(mult_max / ratio))
    while shift < shift_max and round(ratio * 2.0 ** (shift + 1)) <= mult_max:
        shift += 1
    while round(ratio * 2.0 ** shift) > mult_max:
        shift -= 1
    return min(shift, shift_max)


def add_sub(op: str, scale_a: float, scale_b: float, scale_out: float) -> Binary | str:
    """out = a * scale_a / scale_out (+/-) b * scale_b / scale_out."""
    ra, rb = scale_a / scale_out, scale_b / scale_out
    shift = _shift_for(max(ra, rb), ADD_MULT_MAX, SHIFT_MAX_32)
    if shift < 1:
        return f"input/output scale ratio {max(ra, rb):.3g} is above the 21-bit multiplier range"
    sign = -1 if op == "Sub" else 1
    return Binary(round(ra * 2.0 ** shift), sign * round(rb * 2.0 ** shift), shift)


def mul(scale_a: float, scale_b: float, scale_out: float) -> Binary | str:
    """out = (a - za)(b - zb) * scale_a * scale_b / scale_out."""
    r = scale_a * scale_b / scale_out
    shift = _shift_for(r, MUL_MULT_MAX, SHIFT_MAX_32)
    if shift < 1:
        return f"scale ratio {r:.3g} is above the 14-bit multiplier range"
    return Binary(round(r * 2.0 ** shift), 0, shift)


def mean(scale_in: float, count: int, scale_out: float) -> tuple[int, int] | str:
    """(mult, shift) of mean = sum(q - z) * scale_in / (count * scale_out), int64 lanes."""
    if not 0 < count < 1 << 31:
        return f"row length {count} is outside the int64 accumulator's range"
    r = scale_in / (count * scale_out)
    shift = _shift_for(r, MEAN_MULT_MAX, SHIFT_MAX_64)
    if shift < 1:
        return f"scale ratio {r:.3g} is above the 24-bit multiplier range"
    return round(r * 2.0 ** shift), shift

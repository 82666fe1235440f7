"""The fixed-point constants of qfixed.py keep every intermediate of the kernels in range and round like ONNX.

For random float32 scales and zero points (hypothesis), with exact Python integers standing in for the
kernels' int32 / int64 lanes:
  - no intermediate of the scalar formula (qarith.h) or of the HVX lane form (int8 codes biased by 128)
    leaves int32 (Add / Sub / Mul) or int64 (row mean), over every pair of codes;
  - the integer result is the exact real result rounded half to even, except within the fixed-point
    error of a rounding boundary (|exact - nearest half| below the bound qfixed.py states).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from hexfuse.op_package.lower import qfixed

INT32 = (-(1 << 31), (1 << 31) - 1)
CODES = {False: np.arange(0, 256), True: np.arange(-128, 128)}


def f32(x: float) -> float:
    return float(np.float32(x))


scales = st.floats(1e-4, 10.0).map(f32)
signed = st.booleans()


def rne_shift(v: np.ndarray, s: int) -> np.ndarray:
    return (v + (1 << (s - 1)) - 1 + ((v >> s) & 1)) >> s


def rne(x: Fraction) -> int:
    return round(x)  # Python rounds Fractions half to even


def within(v: np.ndarray) -> bool:
    return bool(v.min() >= INT32[0] and v.max() <= INT32[1])


@settings(max_examples=60, deadline=None)
@given(op=st.sampled_from(["Add", "Sub"]), sa=scales, sb=scales, so=scales, is_signed=signed,
       zeros=st.tuples(st.integers(0, 255), st.integers(0, 255)))
def test_add_sub_stays_in_int32_and_rounds_the_exact_value(op, sa, sb, so, is_signed, zeros) -> None:
    fixed = qfixed.add_sub(op, sa, sb, so)
    if isinstance(fixed, str):
        assert max(sa, sb) / so > qfixed.ADD_MULT_MAX / 2
        return
    assert max(abs(fixed.a_mult), abs(fixed.b_mult)) <= qfixed.ADD_MULT_MAX and 1 <= fixed.shift <= qfixed.SHIFT_MAX_32
    za, zb = (z - 128 if is_signed else z for z in zeros)
    a, b = np.meshgrid(CODES[is_signed].astype(np.int64), CODES[is_signed].astype(np.int64))
    bias = -fixed.a_mult * za - fixed.b_mult * zb
    partial = fixed.a_mult * a + fixed.b_mult * b
    v = partial + bias
    hvx_bias = bias - (128 * (fixed.a_mult + fixed.b_mult) if is_signed else 0)  # hvx_qvector.cpp
    assert within(partial) and within(v) and within(np.array([bias, hvx_bias])) and within(v + (1 << fixed.shift))
    ours = rne_shift(v, fixed.shift)
    sign = -1 if op == "Sub" else 1
    bound = 255 / 2 ** (fixed.shift + 1) * 2  # both operands' multiplier rounding, in LSB
    for i, j in ((7, 11), (255, 0), (0, 255), (128, 128), (200, 31)):
        exact = (Fraction(sa) * (int(a[i, j]) - za) + sign * Fraction(sb) * (int(b[i, j]) - zb)) / Fraction(so)
        if abs(abs(exact - int(exact)) - Fraction(1, 2)) > bound:
            assert ours[i, j] == rne(exact), (exact, int(ours[i, j]))


@settings(max_examples=60, deadline=None)
@given(sa=scales, sb=scales, so=scales, is_signed=signed, zeros=st.tuples(st.integers(0, 255), st.integers(0, 255)))
def test_mul_stays_in_int32(sa, sb, so, is_signed, zeros) -> None:
    fixed = qfixed.mul(sa, sb, so)
    if isinstance(fixed, str):
        assert sa * sb / so > qfixed.MUL_MULT_MAX / 2
        return
    assert 0 <= fixed.a_mult <= qfixed.MUL_MULT_MAX and 1 <= fixed.shift <= qfixed.SHIFT_MAX_32
    za, zb = (z - 128 if is_signed else z for z in zeros)
    d = CODES[is_signed].astype(np.int64)
    products = np.outer(d - za, d - zb)
    assert products.max() < 1 << 17 and products.min() >= -(1 << 17)  # the halfword x halfword product
    v = fixed.a_mult * products
    assert within(v) and within(v + (1 << fixed.shift))


@settings(max_examples=60, deadline=None)
@given(sa=scales, so=scales, count=st.integers(1, 1 << 20), zero=st.integers(0, 255))
def test_mean_stays_in_int64(sa, so, count, zero) -> None:
    fixed = qfixed.mean(sa, count, so)
    if isinstance(fixed, str):
        return
    mult, shift = fixed
    assert 0 <= mult <= qfixed.MEAN_MULT_MAX and 1 <= shift <= qfixed.SHIFT_MAX_64
    extreme = max(abs(255 * count - count * zero), abs(0 - count * zero)) * mult + (1 << shift)
    assert extreme < 1 << 63

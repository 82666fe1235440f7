"""256-entry tables for quantized unary maps: entry q = QuantizeLinear(f(DequantizeLinear(q))), ONNX semantics.

    x   = float32(q - zero_in) * scale_in                        DequantizeLinear, float32 as ORT computes it
    y   = f(x) as float32                                        see below
    out = saturate(round_half_even(y / scale_out) + zero_out)    QuantizeLinear: float32 divide, then rint

How f is evaluated, and where numpy and ONNX Runtime's CPU EP can differ:
  - ops that are exact in IEEE float32 (Relu, Neg, Abs, Sqrt, Reciprocal, Floor, Ceil, Round, Sign, Clip,
    LeakyRelu, HardSigmoid, ThresholdedRelu, Shrink, Softsign, HardSwish, Identity) are computed in float32
    with the same operation sequence as the float kernels (elementwise.cpp): equal to ORT bit for bit;
  - transcendental ops are computed in float64 and rounded once to float32 (the correctly rounded result).
    ORT computes them in float32 with its own approximations (MLAS polynomials for Sigmoid / Tanh / Erf /
    Gelu, Eigen or libm for Exp / Log / Sin / Cos ...), a few ulp off at most; an entry can then differ
    by 1 LSB, only where y / scale_out lies within those ulp of a rounding boundary.
  - y = NaN (Log / Sqrt of a negative code, Acos out of range ...) has no defined code in ONNX; the table
    then refuses (the unit stays on the float kernels) rather than guess ORT's platform-specific answer.

The HVX path reads the same table reordered for vlut32 (``vlut32_order``, layout in hvx_qvector.h).
"""

from __future__ import annotations

import math
from typing import Callable, Mapping

import numpy as np

from hexfuse.graph_passes.spec.model import AttributeValue, QuantSpec

F32 = np.float32
Attrs = Mapping[str, AttributeValue]
Unary = Callable[[np.ndarray, Attrs], np.ndarray]  # float32 in, float32 out


def _attr(attrs: Attrs, name: str, default: float) -> np.float32:
    return F32(float(attrs.get(name, default)))  # type: ignore[arg-type]


def _f64(fn: Callable[[np.ndarray], np.ndarray]) -> Unary:
    """A transcendental map: evaluated in float64, rounded once to float32."""
    def run(x: np.ndarray, attrs: Attrs) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(x.astype(np.float64)).astype(F32)
    return run


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(0.0, x)


def _clip(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    lo, hi = _attr(attrs, "min", -np.inf), _attr(attrs, "max", np.inf)
    return np.minimum(np.maximum(x, lo), hi)  # std::min(std::max(x, lo), hi)


def _leaky_relu(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    return np.where(x >= 0, x, _attr(attrs, "alpha", 0.01) * x)


def _hard_sigmoid(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    y = _attr(attrs, "alpha", 0.2) * x + _attr(attrs, "beta", 0.5)  # two float32 roundings, no FMA
    return np.minimum(F32(1), np.maximum(F32(0), y))


def _hard_swish(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    return x * np.minimum(F32(1), np.maximum(F32(0), x / F32(6) + F32(0.5)))


def _shrink(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    lambd, bias = _attr(attrs, "lambd", 0.5), _attr(attrs, "bias", 0.0)
    return np.where(x < -lambd, x + bias, np.where(x > lambd, x - bias, F32(0)))


def _elu(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    alpha = float(attrs.get("alpha", 1.0))  # type: ignore[arg-type]
    return _f64(lambda v: np.where(v >= 0, v, alpha * np.expm1(v)))(x, attrs)


def _celu(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    alpha = float(attrs.get("alpha", 1.0))  # type: ignore[arg-type]
    return _f64(lambda v: np.maximum(0.0, v) + np.minimum(0.0, alpha * np.expm1(v / alpha)))(x, attrs)


def _selu(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    alpha = float(attrs.get("alpha", 1.67326319217681884765625))  # type: ignore[arg-type]
    gamma = float(attrs.get("gamma", 1.05070102214813232421875))  # type: ignore[arg-type]
    return _f64(lambda v: np.where(v > 0, gamma * v, gamma * alpha * np.expm1(v)))(x, attrs)


def _gelu_any(x: np.ndarray, attrs: Attrs) -> np.ndarray:
    return _f64(_gelu_tanh if attrs.get("approximate", "none") == "tanh" else _gelu)(x, attrs)


UNARY: dict[str, Unary] = {
    # exact in float32: the float kernels' expressions
    "Relu": lambda x, a: np.where(x > 0, x, F32(0)),
    "Neg": lambda x, a: -x,
    "Abs": lambda x, a: np.abs(x),
    "Sqrt": lambda x, a: np.sqrt(x),
    "Reciprocal": lambda x, a: F32(1) / x,
    "Floor": lambda x, a: np.floor(x),
    "Ceil": lambda x, a: np.ceil(x),
    "Round": lambda x, a: np.rint(x),
    "Sign": lambda x, a: np.sign(x),
    "Identity": lambda x, a: x,
    "Dropout": lambda x, a: x,
    "Clip": _clip,
    "LeakyRelu": _leaky_relu,
    "HardSigmoid": _hard_sigmoid,
    "HardSwish": _hard_swish,
    "ThresholdedRelu": lambda x, a: np.where(x > _attr(a, "alpha", 1.0), x, F32(0)),
    "Shrink": _shrink,
    "Softsign": lambda x, a: x / (F32(1) + np.abs(x)),
    # transcendental: float64, rounded once
    "Sigmoid": _f64(lambda v: 1.0 / (1.0 + np.exp(-v))),
    "Tanh": _f64(np.tanh),
    "Exp": _f64(np.exp),
    "Log": _f64(np.log),
    "Erf": _f64(_erf),
    "Sin": _f64(np.sin),
    "Cos": _f64(np.cos),
    "Tan": _f64(np.tan),
    "Sinh": _f64(np.sinh),
    "Cosh": _f64(np.cosh),
    "Asin": _f64(np.arcsin),
    "Acos": _f64(np.arccos),
    "Atan": _f64(np.arctan),
    "Asinh": _f64(np.arcsinh),
    "Acosh": _f64(np.arccosh),
    "Atanh": _f64(np.arctanh),
    "Softplus": _f64(_softplus),
    "Mish": _f64(lambda v: v * np.tanh(_softplus(v))),
    "Gelu": _gelu_any,
    "Elu": _elu,
    "Celu": _celu,
    "Selu": _selu,
}

QTYPES = {"uint8": (0, 255), "int8": (-128, 127)}


def codes(dtype: str) -> np.ndarray:
    """The 256 codes of an 8-bit type in table order: the index is the code's byte (int8 as two's complement)."""
    return np.arange(256, dtype=np.uint8).view(np.dtype(dtype)).astype(np.int32)


def dequantize(q: np.ndarray, quant: QuantSpec) -> np.ndarray:
    return (q - np.int32(quant.zero_point[0])).astype(F32) * F32(quant.scale[0])


def quantize(y: np.ndarray, quant: QuantSpec) -> np.ndarray:
    """float32 -> codes of quant.dtype (int32), saturating; inf saturates, NaN must be excluded by the caller."""
    lo, hi = QTYPES[quant.dtype]
    with np.errstate(all="ignore"):
        q = np.rint(y.astype(F32) / F32(quant.scale[0])).astype(np.float64) + quant.zero_point[0]
    return np.clip(q, lo, hi).astype(np.int32)


def lookup_table(op_type: str, attrs: Attrs, quant_in: QuantSpec, quant_out: QuantSpec) -> np.ndarray | str:
    """The table (256 uint8 bytes, indexed by the input byte) or the reason there is none."""
    if op_type not in UNARY:
        return f"{op_type} has no table form"
    with np.errstate(all="ignore"):  # 1/0 = inf saturates like QuantizeLinear does; NaN is refused below
        y = UNARY[op_type](dequantize(codes(quant_in.dtype), quant_in), attrs).astype(F32)
    if np.isnan(y).any():
        bad = int(np.flatnonzero(np.isnan(y))[0])
        return f"{op_type} is NaN at input code {codes(quant_in.dtype)[bad]} (no defined quantized result)"
    return quantize(y, quant_out).astype(np.uint8 if quant_out.dtype == "uint8" else np.int8).view(np.uint8)


def requantize_table(quant_in: QuantSpec, quant_out: QuantSpec) -> np.ndarray:
    """QuantizeLinear(DequantizeLinear(q)) between two 8-bit encodings (the identity map)."""
    table = lookup_table("Identity", {}, quant_in, quant_out)
    assert isinstance(table, np.ndarray)  # Identity is never NaN
    return table


def vlut32_order(table: np.ndarray) -> np.ndarray:
    """The table as the HVX path reads it (hvx_qvector.h): two 128-byte vectors for eight vlut32 segments.

        hvx[128 * r2 + 64 * r0 + 2 * j + r1] = table[32 * r + j]      r = 4 r2 + 2 r1 + r0, j = 0..31
    """
    b = np.arange(256)
    r2, rest = b // 128, b % 128
    r0, j, r1 = rest // 64, (rest % 64) // 2, rest % 2
    return np.asarray(table, np.uint8)[128 * r2 + 64 * r1 + 32 * r0 + j]

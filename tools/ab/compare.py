"""Output equivalence per output tensor: max abs/rel error, cosine similarity, pass/fail.

Integer and bool outputs (token ids, masks, indices) must be equal; float outputs must have their NaN
and infinities in the same places and the finite rest within atol + rtol |ref|, with the cosine
similarity of the finite rest at least min_cosine (where the reference is all zero it has no direction
to compare: the tolerances alone decide)."""
from __future__ import annotations

import numpy as np


def compare_outputs(names: list[str], ref: list[np.ndarray], got: list[np.ndarray],
                    atol: float, rtol: float, min_cosine: float) -> dict:
    rows = []
    for name, a, b in zip(names, ref, got):
        a64 = np.asarray(a).astype(np.float64)
        b64 = np.asarray(b).astype(np.float64)
        if a64.shape != b64.shape:
            rows.append({"output": name, "passed": False, "reason": f"shape {a64.shape} vs {b64.shape}"})
            continue
        finite = np.isfinite(a64)
        same_specials = bool(np.array_equal(np.isnan(a64), np.isnan(b64))
                             and np.array_equal(a64[np.isinf(a64)], b64[np.isinf(a64)]) and np.isfinite(b64[finite]).all())
        a_fin, b_fin = a64[finite], b64[finite]
        diff = np.abs(a_fin - b_fin)
        max_abs = float(diff.max()) if diff.size else 0.0
        rel = diff / np.maximum(np.abs(a_fin), np.finfo(np.float64).tiny)
        max_rel = float(rel.max()) if rel.size else 0.0
        na, nb = float(np.linalg.norm(a_fin)), float(np.linalg.norm(b_fin))
        if na == 0.0 and nb == 0.0:
            cos = 1.0
        elif na == 0.0 or nb == 0.0:
            cos = 0.0
        else:
            cos = float(np.dot(a_fin, b_fin) / (na * nb))
        if np.asarray(a).dtype.kind in "iub" or np.asarray(b).dtype.kind in "iub":  # exact: 1500 vs 1501 is no rounding
            within = bool(np.array_equal(np.asarray(a), np.asarray(b)))
        else:
            within = bool(np.all(diff <= atol + rtol * np.abs(a_fin)))
        passed = same_specials and within and (cos >= min_cosine or na == 0.0)
        rows.append({"output": name, "shape": list(a64.shape), "max_abs_err": max_abs,
                     "max_rel_err": max_rel, "cosine": cos, "passed": passed})
    return {"atol": atol, "rtol": rtol, "min_cosine": min_cosine,
            "passed": all(r["passed"] for r in rows), "outputs": rows}

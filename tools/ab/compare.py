"""Output equivalence per output tensor: max abs/rel error, cosine similarity, pass/fail."""
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
        diff = np.abs(a64 - b64)
        max_abs = float(diff.max()) if diff.size else 0.0
        rel = diff / np.maximum(np.abs(a64), np.finfo(np.float64).tiny)
        max_rel = float(rel.max()) if rel.size else 0.0
        na, nb = float(np.linalg.norm(a64)), float(np.linalg.norm(b64))
        if na == 0.0 and nb == 0.0:
            cos = 1.0
        elif na == 0.0 or nb == 0.0:
            cos = 0.0
        else:
            cos = float(np.dot(a64.ravel(), b64.ravel()) / (na * nb))
        finite = bool(np.isfinite(a64).all() == np.isfinite(b64).all())
        within = bool(np.all(diff <= atol + rtol * np.abs(a64))) if diff.size else True
        passed = finite and within and cos >= min_cosine
        rows.append({"output": name, "shape": list(a64.shape), "max_abs_err": max_abs,
                     "max_rel_err": max_rel, "cosine": cos, "passed": passed})
    return {"atol": atol, "rtol": rtol, "min_cosine": min_cosine,
            "passed": all(r["passed"] for r in rows), "outputs": rows}

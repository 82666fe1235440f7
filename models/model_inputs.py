"""Input value specs of the bundled models (numpy only), shared by the builder and the tests.

A spec, as written to catalog.json: {"kind": "randn"} | {"kind": "randint", "low": a, "high": b}
(high exclusive) | {"kind": "ones"} | {"kind": "const", "value": v}.
"""

from __future__ import annotations

import numpy as np

_NP_DTYPES = {"float32": np.float32, "int64": np.int64}


def make_input(spec: dict, shape: list[int], dtype: str, rng: np.random.Generator) -> np.ndarray:
    kind = spec["kind"]
    if kind == "randn":
        a = rng.standard_normal(shape)
    elif kind == "randint":
        a = rng.integers(spec["low"], spec["high"], size=shape)
    elif kind == "ones":
        a = np.ones(shape)
    elif kind == "const":
        a = np.full(shape, spec["value"])
    else:
        raise ValueError(f"unknown input kind {kind!r}")
    return a.astype(_NP_DTYPES[dtype])

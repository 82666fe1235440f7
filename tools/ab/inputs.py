"""Inputs shared by both models: seeded random tensors or a user NPZ, validated against the model."""
from __future__ import annotations

import math
import zipfile
from pathlib import Path

import numpy as np
import onnx

from hexfuse.graph_passes.errors import HexfuseError

from .models import TensorSpec
from .options import MAX_SEED, int_in


def np_dtype(elem_type: int) -> np.dtype:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError):
        raise HexfuseError(f"unsupported input element type {elem_type}") from None


MAX_RANDOM_BYTES = 2**30  # beyond this a seeded tensor is a typo or a model for --inputs, not for RAM


def random_inputs(specs: list[TensorSpec], seed: int) -> dict[str, np.ndarray]:
    """Symbolic or unknown dims become 1 (say so in docs); values stay small so no op overflows."""
    int_in("--seed", seed, 0, MAX_SEED)  # checked here for every command: ab, compile, bundle
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for s in specs:
        if not s.elem_type:
            raise HexfuseError(f"input {s.name!r} is not a tensor (a sequence, optional or map value): "
                               "seeded inputs cannot be made for it")
        shape = tuple(d if isinstance(d, int) and d > 0 else 1 for d in s.shape)
        dt = np_dtype(s.elem_type)
        if math.prod(shape) * dt.itemsize > MAX_RANDOM_BYTES:
            raise HexfuseError(f"input {s.name!r} of shape {list(shape)} is over {MAX_RANDOM_BYTES // 2**30} GiB: "
                               "too large for seeded inputs; pass --inputs NPZ")
        if dt == np.bool_:
            arr = rng.integers(0, 2, size=shape).astype(np.bool_)
        elif np.issubdtype(dt, np.integer):
            arr = rng.integers(0, s.ids_below, size=shape).astype(dt)
        else:
            arr = rng.standard_normal(size=shape).astype(dt)
        feeds[s.name] = arr
    return feeds


def load_npz(path: str, specs: list[TensorSpec]) -> dict[str, np.ndarray]:
    p = Path(path)
    if not p.is_file():
        raise HexfuseError(f"inputs file not found: {p}")
    try:
        with np.load(p, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile) as e:  # BadZipFile: starts like a zip (PK), is not one
        raise HexfuseError(f"{p} is not a NumPy .npz file ({type(e).__name__})") from None
    want = {s.name: s for s in specs}
    missing, extra = sorted(set(want) - set(data)), sorted(set(data) - set(want))
    if missing or extra:
        raise HexfuseError(f"{p}: input names do not match the model: missing {missing}, unexpected {extra}")
    for name, s in want.items():
        arr, dt = data[name], np_dtype(s.elem_type)
        if arr.dtype != dt:
            raise HexfuseError(f"{p}: input '{name}' has dtype {arr.dtype}, model wants {dt}")
        ok = arr.ndim == len(s.shape) and all(
            not isinstance(d, int) or d <= 0 or d == n for d, n in zip(s.shape, arr.shape))
        if not ok:
            raise HexfuseError(f"{p}: input '{name}' has shape {list(arr.shape)}, model wants {s.describe()}")
    return data

"""ONNX Runtime helpers for checking fused models: seeded inputs, CPU EP sessions, output diffs.

``compare_on_cpu`` runs two whole models side by side (tests);
``hexfuse fuse`` verifies through graph_passes.verify, which uses the helpers here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from hexfuse.graph_passes.errors import HexfuseError

RELATIVE_TOLERANCE = 1e-6  # ORT may reorder float math inside an inlined function


@dataclass(frozen=True)
class OutputDiff:
    name: str
    max_abs: float
    max_rel: float

    @property
    def equal(self) -> bool:
        return self.max_rel <= RELATIVE_TOLERANCE


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input that is not an initializer."""
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    feeds = {}
    for info in model.graph.input:
        if info.name in initializers:
            continue
        tensor_type = info.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tensor_type.shape.dim]
        if any(d <= 0 for d in dims):
            raise HexfuseError(f"input {info.name!r} has a dynamic shape; cannot make random inputs for it")
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        if dtype == np.bool_:
            feeds[info.name] = np.asarray(rng.random(dims) < 0.5)  # a 0-d draw is a numpy scalar
        elif np.issubdtype(dtype, np.integer):
            feeds[info.name] = rng.integers(0, 8, size=dims).astype(dtype)  # small: valid ids and indices
        else:
            feeds[info.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def session(model_bytes: bytes, level: str = "default", what: str = "the model"):
    """A CPU EP session; ``level`` "none" disables ONNX Runtime's graph optimizations (cheapest to create)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if level == "none":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph types
        raise HexfuseError(f"ONNX Runtime cannot load {what}: {str(exc).splitlines()[0]}") from None


def run(model_bytes: bytes, feeds: dict[str, np.ndarray], level: str = "default", what: str = "the model") -> dict[str, np.ndarray]:
    """Every graph output of the model by name."""
    live = session(model_bytes, level, what)
    names = [output.name for output in live.get_outputs()]
    wanted = {i.name for i in live.get_inputs()}
    try:
        values = live.run(None, {k: v for k, v in feeds.items() if k in wanted})
    except Exception as exc:
        raise HexfuseError(f"ONNX Runtime cannot run {what}: {str(exc).splitlines()[0]}") from None
    return dict(zip(names, values))


def diff(name: str, want: np.ndarray, got: np.ndarray) -> OutputDiff:
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape or want.dtype != got.dtype:
        return OutputDiff(name, float("inf"), float("inf"))
    if want.dtype.kind not in "fc":
        differ = float(np.count_nonzero(want != got))
        return OutputDiff(name, differ, differ)
    error = np.abs(want.astype(np.float64) - got.astype(np.float64))
    scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
    max_abs = float(np.max(error)) if error.size else 0.0
    return OutputDiff(name, max_abs, max_abs / scale)


def compare_on_cpu(original: bytes, fused: bytes, seed: int = 0) -> list[OutputDiff]:
    """Both whole models on the same seeded inputs, every output of the fused model compared."""
    model = onnx.load_model_from_string(original)
    feeds = random_inputs(model, seed)
    expected = run(original, feeds, what="the original model")
    actual = run(fused, feeds, what="the fused model")
    return [diff(name, want, actual[name]) for name, want in expected.items() if name in actual]

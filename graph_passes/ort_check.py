"""Run two models on ONNX Runtime's CPU EP with the same random inputs and compare their outputs.

Used by ``hexfuse fuse`` to prove on real numbers what the rewrite proved on the graph.
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


def _session(model_bytes: bytes):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    try:
        return ort.InferenceSession(model_bytes, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own Fail/InvalidGraph types
        raise HexfuseError(f"ONNX Runtime cannot load the model: {str(exc).splitlines()[0]}") from None


def compare_on_cpu(original: bytes, fused: bytes, seed: int = 0) -> list[OutputDiff]:
    model = onnx.load_model_from_string(original)
    feeds = random_inputs(model, seed)
    expected = _session(original).run(None, feeds)
    fused_session = _session(fused)
    names = [output.name for output in fused_session.get_outputs()]
    actual = fused_session.run(None, feeds)
    diffs = []
    for name, want, got in zip(names, expected, actual):
        want = np.asarray(want)
        got = np.asarray(got)
        if want.shape != got.shape or want.dtype != got.dtype:
            diffs.append(OutputDiff(name, float("inf"), float("inf")))
            continue
        if want.dtype.kind not in "fc":
            differ = float(np.count_nonzero(want != got))
            diffs.append(OutputDiff(name, differ, differ))
            continue
        error = np.abs(want.astype(np.float64) - got.astype(np.float64))
        scale = max(float(np.max(np.abs(want))) if want.size else 0.0, 1e-30)
        max_abs = float(np.max(error)) if error.size else 0.0
        diffs.append(OutputDiff(name, max_abs, max_abs / scale))
    return diffs

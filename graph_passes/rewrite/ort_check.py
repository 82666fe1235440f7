"""ONNX Runtime helpers for checking fused models: seeded inputs, CPU EP sessions, output diffs.

``compare_on_cpu`` runs two whole models side by side (tests);
``hexfuse fuse`` verifies through graph_passes.rewrite.verify, which uses the helpers here.
"""

from __future__ import annotations

import math
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


MAX_INPUT_BYTES = 2**30  # seeded inputs verification makes, in all; beyond that it says so instead of trying


def _cannot(name: str, why: str) -> HexfuseError:
    return HexfuseError(f"verification cannot generate input {name!r}: {why} (--no-verify skips verification)")


def _input_plan(info: onnx.ValueInfoProto) -> tuple[list[int], np.dtype]:
    """(dims, dtype) of a graph input seeded inputs can be made for, or why not."""
    kind = info.type.WhichOneof("value")
    if kind != "tensor_type":
        raise _cannot(info.name, f"its type is {kind.replace('_type', '') if kind else 'not set'}, not a tensor")
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        raise _cannot(info.name, "its shape is unknown")
    dims = []
    for axis, dim in enumerate(tensor_type.shape.dim):
        if not dim.HasField("dim_value"):
            raise _cannot(info.name, f"dimension {axis} is dynamic ({dim.dim_param or 'unknown'!r})")
        if dim.dim_value < 0:
            raise _cannot(info.name, f"dimension {axis} is negative ({dim.dim_value})")
        dims.append(dim.dim_value)  # 0 is a static, empty dimension
    try:
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    except (KeyError, TypeError, ValueError):
        raise _cannot(info.name, f"element type {tensor_type.elem_type} has no numpy type") from None
    if dtype.kind not in "biuf" and dtype.name not in ("bfloat16",):
        raise _cannot(info.name, f"element type {dtype.name} is not a number")
    size = math.prod(dims) * dtype.itemsize
    if size > MAX_INPUT_BYTES:
        raise _cannot(info.name, f"{size / 2**30:.3g} GiB is more than verification feeds a model ({MAX_INPUT_BYTES / 2**30:.0f} GiB)")
    return dims, dtype


def index_limits(model: onnx.ModelProto) -> dict[str, int]:
    """Graph inputs a Gather reads as indices -> how many rows its table has, where that is under 8 and
    static: the seeded ids must stay in range (ids 0-7 into a 4-row table made ORT refuse the run)."""
    graph = model.graph
    shapes = {t.name: tuple(t.dims) for t in graph.initializer}
    for info in (*graph.input, *graph.value_info):
        dims = info.type.tensor_type.shape.dim
        if info.name not in shapes and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    fed = {info.name for info in graph.input}
    limits: dict[str, int] = {}
    for node in graph.node:
        if node.op_type not in ("Gather", "GatherElements") or len(node.input) < 2 or node.input[1] not in fed:
            continue
        shape = shapes.get(node.input[0])
        axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
        if shape and -len(shape) <= axis < len(shape) and shape[axis] > 0:
            limits[node.input[1]] = min(limits.get(node.input[1], 8), shape[axis])
    return limits


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input that is not an initializer; one error line naming an
    input it cannot make (not a tensor, dynamic or huge shape, no numeric type)."""
    rng = np.random.default_rng(seed)
    initializers = {init.name for init in model.graph.initializer}
    plans = [(info.name, _input_plan(info)) for info in model.graph.input if info.name not in initializers]
    if sum(math.prod(dims) * dtype.itemsize for _, (dims, dtype) in plans) > MAX_INPUT_BYTES:
        raise _cannot(plans[0][0], f"all inputs together are more than {MAX_INPUT_BYTES / 2**30:.0f} GiB")
    limits = index_limits(model)
    feeds = {}
    for name, (dims, dtype) in plans:
        if dtype == np.bool_:
            feeds[name] = np.asarray(rng.random(dims) < 0.5)  # a 0-d draw is a numpy scalar
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, limits.get(name, 8), size=dims).astype(dtype)  # small: valid ids and indices
        else:
            feeds[name] = rng.standard_normal(dims).astype(dtype)
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
    """Max absolute and relative difference; NaN equals NaN and an infinity the same infinity (a Log
    or Sqrt branch on random inputs gives them in both models), anything else beside them differs."""
    want, got = np.asarray(want), np.asarray(got)
    if want.shape != got.shape or want.dtype != got.dtype:
        return OutputDiff(name, float("inf"), float("inf"))
    if want.dtype.kind not in "fc":
        differ = float(np.count_nonzero(want != got))
        return OutputDiff(name, differ, differ)
    if np.array_equal(want, got):  # the usual verdict, in one pass (below: a dozen passes in float64)
        return OutputDiff(name, 0.0, 0.0)
    want, got = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64), got.astype(
        np.complex128 if got.dtype.kind == "c" else np.float64)
    same = (want == got) | (np.isnan(want) & np.isnan(got))  # equal infinities compare equal already
    finite = np.isfinite(want) & np.isfinite(got)
    if not np.all(same | finite):
        return OutputDiff(name, float("inf"), float("inf"))  # NaN against a number, or inf against another value
    error = np.abs(np.where(same, 0.0, want) - np.where(same, 0.0, got))  # no inf - inf
    scale = max(float(np.max(np.abs(want[np.isfinite(want)]))) if np.isfinite(want).any() else 0.0, 1e-30)
    max_abs = float(np.max(error)) if error.size else 0.0
    return OutputDiff(name, max_abs, max_abs / scale)


def compare_on_cpu(original: bytes, fused: bytes, seed: int = 0, level: str = "default") -> list[OutputDiff]:
    """Both whole models on the same seeded inputs, every output of the fused model compared; ``level``
    as in ``session``, for both."""
    model = onnx.load_model_from_string(original)
    feeds = random_inputs(model, seed)
    expected = run(original, feeds, level, what="the original model")
    actual = run(fused, feeds, level, what="the fused model")
    return [diff(name, want, actual[name]) for name, want in expected.items() if name in actual]

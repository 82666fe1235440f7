"""Each request's outputs from the combined model against the model it was combined from, on ONNX
Runtime's CPU EP, and each request's outputs independent of every other request's inputs.

Bound: ONNX Runtime's CPU MatMul (MLAS) may round a row differently when it runs among other rows (its
blocking follows the row count), and a QuantizeLinear after it turns that last-bit difference into a whole
step where the value sits at a rounding tie (measured: a decode row's 16-bit outputs one step off, 48 of
256 elements, with graph optimizations off as on). Every other op of a chain (elementwise, normalizations,
Gather, Concat/Split, Quantize/Dequantize) computes each row from that row alone. So an output must be
within RELATIVE_BOUND of the reference (of the output's largest magnitude) or, for an output that a
DequantizeLinear gives, within STEP_BOUND of its quantization steps; integer outputs within STEP_BOUND
steps. The report says which outputs were bit-exact, and the largest difference in steps.

Independence: the combined model is run again with one request's inputs changed (another seed); every
other request's outputs must be bit-identical to the first run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from hexfuse.graph_passes.combine.view import RequestView
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.rewrite.ort_check import diff, random_inputs, run

RELATIVE_BOUND = 1e-5  # float32 sums of up to ~1e4 terms in another order: a few ulp of the largest output
STEP_BOUND = 2  # quantization steps: a flipped rounding, and its echo through the ops after it
STEP_SLACK = 0.01  # a difference of whole steps, measured in float32, is a whole number only within rounding


@dataclass(frozen=True)
class RequestCheck:
    request: str
    outputs: int
    exact: int  # outputs bit-identical to the reference
    max_rel: float  # largest difference over the request's outputs, relative to each output's largest value
    independent: bool  # its outputs did not change when another request's inputs did
    within: bool = True  # every output within the bound (module doc)
    max_steps: float | None = None  # largest difference of a quantized output, in its steps (None: none quantized)


@dataclass(frozen=True)
class Verification:
    checks: tuple[RequestCheck, ...]

    @property
    def passed(self) -> bool:
        return all(c.within and c.independent for c in self.checks)


def output_steps(model: onnx.ModelProto) -> dict[str, float]:
    """Graph outputs a DequantizeLinear gives with one scale -> that scale (one step of the output)."""
    scales = {init.name: init for init in model.graph.initializer if int(np.prod(init.dims)) == 1}
    outputs = {o.name for o in model.graph.output}
    steps = {}
    for node in model.graph.node:
        if node.op_type == "DequantizeLinear" and node.output[0] in outputs and node.input[1] in scales:
            steps[node.output[0]] = float(numpy_helper.to_array(scales[node.input[1]]).reshape(-1)[0])
    return steps


def _owners(view: RequestView, names: list[str]) -> dict[str, int]:
    """Graph input or output -> the index of the request it belongs to."""
    return {name: view.requests_of_tensor(name) for name in names}


def _compared(reference: np.ndarray, got: np.ndarray, step: float | None) -> tuple[float, float | None, bool]:
    """(difference relative to the output's largest value, difference in steps or None, within the bound)."""
    result = diff("", reference, got)
    if reference.dtype.kind not in "fc":
        return (0.0 if result.max_abs == 0 else result.max_rel), result.max_abs, result.max_abs <= STEP_BOUND
    steps = result.max_abs / step if step else None
    return result.max_rel, steps, result.max_rel <= RELATIVE_BOUND or (steps is not None and steps <= STEP_BOUND + STEP_SLACK)


def verify_combined(view: RequestView, reference: bytes, combined: bytes, seed: int = 0) -> Verification:
    """``view``: the requests of ``reference`` (the merged, or requantized merged, model)."""
    feeds = random_inputs(view.model, seed)
    want = run(reference, feeds, what="the merged model")
    got = run(combined, feeds, what="the combined model")
    input_owner = _owners(view, list(feeds))
    output_owner = _owners(view, view.graph_outputs)
    changed_outputs: dict[int, set[str]] = {r: set() for r in range(view.count)}
    for request in range(view.count):
        other = random_inputs(view.model, seed + 1 + request)
        moved = {k: (other[k] if input_owner[k] == request else v) for k, v in feeds.items()}
        if not any(input_owner[k] == request for k in feeds):
            continue
        again = run(combined, moved, what="the combined model")
        for name, value in again.items():
            owner = output_owner.get(name)
            if owner is not None and owner != request and not np.array_equal(value, got[name], equal_nan=value.dtype.kind == "f"):
                changed_outputs[owner].add(name)
    steps = output_steps(view.model)
    checks = []
    for request, label in enumerate(view.names):
        names = [n for n in view.graph_outputs if output_owner[n] == request]
        compared = [_compared(want[n], got[n], steps.get(n)) for n in names]
        exact = sum(1 for n in names if np.array_equal(want[n], got[n], equal_nan=want[n].dtype.kind == "f"))
        in_steps = [c[1] for c in compared if c[1] is not None]
        checks.append(RequestCheck(label, len(names), exact, max((c[0] for c in compared), default=0.0),
                                   not changed_outputs[request], all(c[2] for c in compared),
                                   max(in_steps) if in_steps else None))
    return Verification(tuple(checks))


def require(verification: Verification) -> None:
    for check in verification.checks:
        if not check.within:
            steps = "" if check.max_steps is None else f", {check.max_steps:.3g} quantization steps (bound {STEP_BOUND})"
            raise HexfuseError(f"verification failed: request {check.request}'s outputs differ from the merged model's by "
                               f"{check.max_rel:.3g} of their largest value (bound {RELATIVE_BOUND:g}){steps}; "
                               "please report it")
        if not check.independent:
            raise HexfuseError(f"verification failed: request {check.request}'s outputs changed when another request's "
                               "inputs did; please report it")

"""Each request's outputs from the combined model against the model it was combined from, on ONNX
Runtime's CPU EP, and each request's outputs independent of every other request's inputs.

Bound: ONNX Runtime's CPU MatMul (MLAS) blocks its sums by the number of rows, so a projection run on
prefill + decode rows may round a row differently than on that request's rows alone; every other op of
a chain (elementwise, normalizations, Gather, Concat/Split, Quantize/Dequantize) computes each row from
that row with the same instructions. Float outputs must be within RELATIVE_BOUND of the reference (of
the output's largest magnitude); integer (quantized) outputs within INTEGER_BOUND steps. The report
says which outputs were bit-exact.

Independence: the combined model is run again with one request's inputs changed (another seed); every
other request's outputs must be bit-identical to the first run.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hexfuse.graph_passes.combine.view import RequestView
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.rewrite.ort_check import diff, random_inputs, run

RELATIVE_BOUND = 1e-5  # float32 sums of up to ~1e4 terms in another order: a few ulp of the largest output
INTEGER_BOUND = 1  # a quantized output may round to the neighbouring step where its float input moved by an ulp


@dataclass(frozen=True)
class RequestCheck:
    request: str
    outputs: int
    exact: int  # outputs bit-identical to the reference
    max_rel: float  # largest difference over the request's outputs, relative to each output's largest value
    independent: bool  # its outputs did not change when another request's inputs did

    @property
    def within(self) -> bool:
        return self.max_rel <= RELATIVE_BOUND


@dataclass(frozen=True)
class Verification:
    checks: tuple[RequestCheck, ...]

    @property
    def passed(self) -> bool:
        return all(c.within and c.independent for c in self.checks)


def _owners(view: RequestView, names: list[str]) -> dict[str, int]:
    """Graph input or output -> the index of the request it belongs to."""
    return {name: view.requests_of_tensor(name) for name in names}


def _relative(reference: np.ndarray, got: np.ndarray) -> float:
    result = diff("", reference, got)
    if reference.dtype.kind not in "fc":
        return 0.0 if result.max_abs <= INTEGER_BOUND else float("inf")
    return result.max_rel


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
    checks = []
    for request, label in enumerate(view.names):
        names = [n for n in view.graph_outputs if output_owner[n] == request]
        rel = [_relative(want[n], got[n]) for n in names]
        exact = sum(1 for n in names if np.array_equal(want[n], got[n], equal_nan=want[n].dtype.kind == "f"))
        checks.append(RequestCheck(label, len(names), exact, max(rel, default=0.0), not changed_outputs[request]))
    return Verification(tuple(checks))


def require(verification: Verification) -> None:
    for check in verification.checks:
        if not check.within:
            raise HexfuseError(f"verification failed: request {check.request}'s outputs differ from the merged model's by "
                               f"{check.max_rel:.3g} of their largest value (bound {RELATIVE_BOUND:g}); please report it")
        if not check.independent:
            raise HexfuseError(f"verification failed: request {check.request}'s outputs changed when another request's "
                               "inputs did; please report it")

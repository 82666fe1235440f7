"""Run an original and its fused model on the QNN EP's HTP backend (the x86 simulator) with the fused
model's op package registered; print a JSON summary. Runs as a subprocess of the tests: a QNN EP
failure can abort the whole process, and each package library must be the only one of its name.

Usage: htp_run.py ORIGINAL FUSED LIBRARY PACKAGE OPTYPE[,OPTYPE...]
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import onnxruntime as ort

from hexfuse.graph_passes.ort_check import random_inputs
from hexfuse.op_package.render import op_packages_option
from hexfuse.tools.ab.qnn_session import QNN_EP, read_assignment, register_qnn


def _session(path: str, devices, op_packages: str | None) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    provider = {"backend_type": "htp"}
    if op_packages:
        provider["op_packages"] = op_packages
    options.add_provider_for_devices(devices, provider)
    return ort.InferenceSession(path, options)


def _grid_step(values: np.ndarray) -> float:
    """The spacing of the values of a dequantized output (0 for float outputs)."""
    steps = np.diff(np.unique(values.astype(np.float64).ravel()))
    steps = steps[steps > 1e-12]
    return float(steps.min()) if steps.size else 0.0


def main(original: str, fused: str, library: str, package: str, op_types: str) -> None:
    devices = register_qnn()
    feeds = random_inputs(onnx.load(original))
    exact = ort.SessionOptions()
    exact.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # ONNX semantics, no fusions
    reference = ort.InferenceSession(original, exact, providers=["CPUExecutionProvider"]).run(None, feeds)
    want = _session(original, devices, None).run(None, feeds)
    session = _session(fused, devices, op_packages_option(package, op_types.split(","), library))
    got = session.run(None, feeds)
    claimed = [n["op_type"] for n in read_assignment(session).nodes if n["ep"] == QNN_EP and n["domain"] == "hexfuse"]
    fused_nodes = [n.op_type for n in onnx.load(fused, load_external_data=False).graph.node if n.domain == "hexfuse"]
    outputs = []
    for ref, a, b in zip(reference, want, got):
        ref, a, b = (np.asarray(x, np.float64) for x in (ref, a, b))
        outputs.append({"max_abs": float(np.max(np.abs(a - b))), "max_ref": float(np.max(np.abs(a))),
                        "grid": _grid_step(ref), "original_vs_onnx": float(np.max(np.abs(a - ref))),
                        "fused_vs_onnx": float(np.max(np.abs(b - ref))), "differing": int(np.sum(a != b)), "size": a.size})
    print(json.dumps({"claimed": sorted(claimed), "fused_nodes": sorted(fused_nodes), "outputs": outputs}))


if __name__ == "__main__":
    main(*sys.argv[1:])

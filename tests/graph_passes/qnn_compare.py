"""Run original and fused models on the QNN EP HTP backend (x86 simulator), print a JSON summary.

Runs as a subprocess of the tests: a QNN EP failure can abort the whole process (DESIGN.md section 3),
which must fail one test, not kill the test session. Usage: qnn_compare.py ORIGINAL FUSED [...pairs]
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import onnxruntime as ort

from hexfuse.graph_passes.rewrite.ort_check import random_inputs
from hexfuse.tools.ab.qnn_session import QNN_EP, read_assignment, register_qnn


def _run(path: str, feeds: dict, devices) -> tuple[list[np.ndarray], dict[str, int]]:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    options.add_provider_for_devices(devices, {"backend_type": "htp"})
    session = ort.InferenceSession(path, options)
    return session.run(None, feeds), read_assignment(session).per_ep


def main(paths: list[str]) -> None:
    devices = register_qnn()
    summary = []
    for original, fused in zip(paths[::2], paths[1::2]):
        feeds = random_inputs(onnx.load(original))
        want, want_eps = _run(original, feeds, devices)
        got, got_eps = _run(fused, feeds, devices)
        diffs = [float(np.max(np.abs(a.astype(np.float64) - b))) if a.size else 0.0 for a, b in zip(want, got)]
        ranges = [float(np.max(np.abs(a))) if a.size else 0.0 for a in want]
        summary.append({"original": original, "max_abs": diffs, "max_ref": ranges,
                        "qnn_nodes": [want_eps.get(QNN_EP, 0), got_eps.get(QNN_EP, 0)],
                        "cpu_nodes": [want_eps.get("CPUExecutionProvider", 0), got_eps.get("CPUExecutionProvider", 0)]})
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])

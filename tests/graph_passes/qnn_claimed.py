"""Load models on the QNN EP (HTP simulator) with CPU fallback off and run them once; print, per model,
the nodes each EP took and the number of EP partitions (JSON). A subprocess of the tests, like
qnn_compare.py: a QNN EP failure can abort the whole process. Usage: qnn_claimed.py MODEL [...]"""

from __future__ import annotations

import json
import sys

import onnx
import onnxruntime as ort

from hexfuse.graph_passes.rewrite.ort_check import random_inputs
from hexfuse.tools.ab.qnn_session import read_assignment, register_qnn


def main(paths: list[str]) -> None:
    devices = register_qnn()
    summary = {}
    for path in paths:
        options = ort.SessionOptions()
        options.log_severity_level = 3
        options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
        options.add_provider_for_devices(devices, {"backend_type": "htp"})
        session = ort.InferenceSession(path, options)
        session.run(None, random_inputs(onnx.load(path)))
        assignment = read_assignment(session)
        summary[path] = {"per_ep": assignment.per_ep, "partitions": assignment.n_subgraphs}
    print(json.dumps(summary))


if __name__ == "__main__":
    main(sys.argv[1:])

"""Load a context model back in a fresh process and check it against the model it was prepared from.

Usage: device_ctx_check.py CONTEXT MODEL OP_PACKAGES|- PROVIDER_OPTIONS_JSON

Prints one JSON line: when OP_PACKAGES is given, what loading the context without the package says (tried
first: once a live session registered the package, the QNN backend keeps it for the process); then the
context run against a non-context run of MODEL (same options, same package) and the load time. A
subprocess: a QNN EP failure can abort the whole process.
"""
from __future__ import annotations

import json
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

from hexfuse.tools.ab import models
from hexfuse.tools.ab.inputs import random_inputs
from hexfuse.tools.ab.qnn_session import QNN_EP, read_assignment, register_qnn


def _session(path: str, options: dict, op_packages: str | None):
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    so.add_provider_for_devices(register_qnn(), dict(options, **({"op_packages": op_packages} if op_packages else {})))
    return ort.InferenceSession(path, so, enable_fallback=0)


def main(context: str, model: str, op_packages: str, options_json: str) -> None:
    options = json.loads(options_json)
    packages = None if op_packages == "-" else op_packages
    summary: dict = {}
    if packages:  # first, while nothing in this process has registered the package (the backend keeps it)
        try:
            _session(context, options, None)
            summary["without_package"] = "loaded"
        except Exception as exc:  # noqa: BLE001 (the evidence is the message)
            summary["without_package"] = str(exc).strip().splitlines()[0]
    feeds = random_inputs(models.graph_inputs(models.load_model(model)), 0)
    start = time.perf_counter()
    ctx = _session(context, options, packages)
    load_s = time.perf_counter() - start
    got = ctx.run(None, feeds)
    nodes = read_assignment(ctx).nodes
    want = _session(model, options, packages).run(None, feeds)
    summary |= {"load_s": load_s, "equal": all(np.array_equal(a, b) for a, b in zip(want, got)),
               "max_abs": max(float(np.max(np.abs(np.asarray(a, np.float64) - b))) for a, b in zip(want, got)),
               "context_nodes": sorted({n["op_type"] for n in nodes if n["ep"] == QNN_EP}),
               "ep_context_nodes": sum(1 for n in onnx.load(context, load_external_data=False).graph.node
                                       if n.op_type == "EPContext")}
    print(json.dumps(summary))


if __name__ == "__main__":
    main(*sys.argv[1:])

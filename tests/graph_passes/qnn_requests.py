"""Run two models separately and their merged (maybe fused) model on the QNN EP HTP backend (x86
simulator) with the same inputs; print a JSON summary of the differences per output.

A subprocess of the tests, like qnn_compare.py: a QNN EP failure can abort the whole process.
Usage: qnn_requests.py MERGED.onnx MAPPING.merge.json A.onnx B.onnx
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx

from hexfuse.graph_passes.rewrite.ort_check import random_inputs
from hexfuse.tools.ab.qnn_session import QNN_EP, register_qnn
from tests.graph_passes.qnn_compare import _run


def main(merged: str, mapping_path: str, *originals: str) -> None:
    devices = register_qnn()
    mapping = json.loads(open(mapping_path).read())
    feeds, want, qnn_nodes = {}, {}, {}
    for number, (path, request) in enumerate(zip(originals, mapping["requests"])):
        own = random_inputs(onnx.load(path), seed=number)
        outputs, eps = _run(path, own, devices)
        names = [o.name for o in onnx.load(path, load_external_data=False).graph.output]
        feeds.update({request["inputs"][name]: value for name, value in own.items()})
        want.update({request["outputs"][name]: value for name, value in zip(names, outputs)})
        qnn_nodes[path] = eps.get(QNN_EP, 0)
    got, eps = _run(merged, feeds, devices)
    qnn_nodes[merged] = eps.get(QNN_EP, 0)
    names = [o.name for o in onnx.load(merged, load_external_data=False).graph.output]
    rows = [{"output": name, "max_abs": float(np.max(np.abs(value.astype(np.float64) - want[name]))),
             "max_ref": float(np.max(np.abs(want[name])))} for name, value in zip(names, got)]
    print(json.dumps({"outputs": rows, "qnn_nodes": qnn_nodes, "cpu_nodes_merged": eps.get("CPUExecutionProvider", 0)}))


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Run an original and its fused model on the QNN EP's HTP backend (the x86 simulator) with the fused
model's op package registered; print a JSON summary. Runs as a subprocess of the tests: a QNN EP
failure can abort the whole process, and each package library must be the only one of its name.

Usage: htp_run.py ORIGINAL FUSED LIBRARY PACKAGE OPTYPE[,OPTYPE...] [SCHEDULE_DIR]

With SCHEDULE_DIR, the fused model is also run with profiling_level=optrace there, once as written
(serial = 0) and once with every fused node's barrier switch on (serial = 1): the per-fused-node
schedules read from the two schematics (tools/optrace.py) are added to the summary, and whether the
two modes computed the same outputs (they share every kernel).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import onnx
import onnxruntime as ort

from hexfuse.graph_passes.rewrite.ort_check import random_inputs
from hexfuse.op_package.render import op_packages_option
from hexfuse.tools.ab.qnn_session import QNN_EP, read_assignment, register_qnn


def _session(path: str, devices, op_packages: str | None, optrace: bool = False) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    provider = {"backend_type": "htp"}
    if op_packages:
        provider["op_packages"] = op_packages
    if optrace:  # the schematic lands in the working folder
        provider.update({"profiling_level": "optrace", "profiling_file_path": "profile.csv"})
    options.add_provider_for_devices(devices, provider)
    return ort.InferenceSession(path, options)


def _grid_step(values: np.ndarray) -> float:
    """The spacing of the values of a dequantized output (0 for float outputs)."""
    steps = np.diff(np.unique(values.astype(np.float64).ravel()))
    steps = steps[steps > 1e-12]
    return float(steps.min()) if steps.size else 0.0


def _schedules(fused: str, devices, op_packages: str, folder: str, feeds: dict) -> tuple[dict, bool]:
    """Per serial mode, per fused node: engines and run-list spans of the ops QNN made of it; and
    whether both modes gave the same outputs."""
    import os

    from hexfuse.tools.optrace import find_schematics, fused_node_schedules, read_schematic

    model = onnx.load(fused)
    out, results = {}, {}
    for serial in (0, 1):
        for node in model.graph.node:
            if node.domain == "hexfuse":
                for attribute in node.attribute:
                    if attribute.name == "serial":
                        attribute.i = serial
        where = os.path.join(folder, f"serial{serial}")
        os.makedirs(where, exist_ok=True)
        path = os.path.join(where, "model.onnx")
        onnx.save(model, path)
        here = os.getcwd()
        os.chdir(where)
        try:
            results[serial] = _session(path, devices, op_packages, optrace=True).run(None, feeds)
        finally:
            os.chdir(here)
        schematic = max(find_schematics(where), key=lambda p: p.stat().st_size)
        out[str(serial)] = {f.node: {"matrix": [[s.name, s.engine, s.start, s.end] for s in f.matrix],
                                     "tasks": [[s.name, s.engine, s.start, s.end] for s in f.tasks],
                                     "overlapped": f.overlapped}
                            for f in fused_node_schedules(read_schematic(schematic))}
    same = all(np.array_equal(a, b) for a, b in zip(results[0], results[1]))
    return out, same


def main(original: str, fused: str, library: str, package: str, op_types: str, schedule_dir: str = "") -> None:
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
    summary = {"claimed": sorted(claimed), "fused_nodes": sorted(fused_nodes), "outputs": outputs}
    if schedule_dir:
        summary["schedules"], summary["serial_matches"] = _schedules(
            fused, devices, op_packages_option(package, op_types.split(","), library), schedule_dir, feeds)
    print(json.dumps(summary))


if __name__ == "__main__":
    main(*sys.argv[1:])

"""Per-node profiles: QNN EP CSV (profiling_level=detailed) and ORT's own profiler JSON (CPU EP).

QNN CSV as written by onnxruntime-qnn 2.7.0 (HTP simulator), header
`Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier`.
Each session.run appends one block that starts at the ROOT row `Accelerator (execute) time (cycles)`
followed by NODE/SUB-EVENT rows `<onnx node name>:OpId_<n> (cycles)` (plus `Input OpId_2 (cycles)` and
`Output OpId_3 (cycles)`) in execution order, then `Accelerator (execute) time` in US and
`QNN (execute) time`. Rows carry durations only, no start times.
"""
from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from hexfuse.graph_passes.cost.profile_rows import row_name
from hexfuse.graph_passes.errors import HexfuseError


def parse_qnn_csv(path: str | Path) -> dict:
    """Per-run node cycles -> medians per node, and the whole-graph accelerator cycles per run."""
    p = Path(path)
    if not p.is_file():
        raise HexfuseError(f"QNN profile CSV was not written: {p}")
    runs: list[list[tuple[str, float]]] = []
    accel_cycles: list[float] = []
    accel_us: list[float] = []
    with open(p, newline="") as f:
        for row in csv.DictReader(f):
            ident = (row.get("Event Identifier") or "").strip()
            unit = (row.get("Unit of Measurement") or "").strip().upper()
            try:
                value = float(row.get("Time") or "nan")
            except ValueError:
                continue
            if ident == "Accelerator (execute) time (cycles)":
                accel_cycles.append(value)
                runs.append([])
            elif ident == "Accelerator (execute) time" and unit == "US":
                accel_us.append(value)
            elif (row.get("Message") or "").strip() == "NODE" and unit == "CYCLES" and runs:
                name = row_name(ident) or ident
                runs[-1].append((name, value))
    if not runs or not any(runs):
        raise HexfuseError(f"QNN profile CSV {p} holds no per-node rows (profiling_level=detailed?)")
    order: list[str] = []
    per_node: dict[str, list[float]] = {}
    for run in runs:
        for name, cyc in run:
            if name not in per_node:
                order.append(name)
                per_node[name] = []
            per_node[name].append(cyc)
    nodes = [(n, float(np.median(per_node[n]))) for n in order]
    return {"runs": len(runs), "nodes": nodes,
            "accelerator_cycles": accel_cycles, "accelerator_us": accel_us}


def qnn_profile_summary(path: Path) -> tuple[dict, list[dict]]:
    """A QNN detailed-profile CSV as the report keeps it, and its rows laid back to back for the timeline."""
    parsed = parse_qnn_csv(path)
    rows = [{"name": n, "duration": c, "start": None} for n, c in parsed["nodes"]]
    summary = {"format": "qnn_csv", "file": path.name, "unit": "cycles", "runs": parsed["runs"],
               "accelerator_cycles_median": float(np.median(parsed["accelerator_cycles"]))
               if parsed["accelerator_cycles"] else None,
               "serial_sum_cycles": float(sum(c for _, c in parsed["nodes"])),
               "nodes": [{"name": n, "cycles": c} for n, c in parsed["nodes"]]}
    return summary, rows


def parse_ort_profile(path: str | Path) -> dict:
    """ORT profiler JSON: Node events named `<node>_kernel_time`; keep the last run's events."""
    try:
        events = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise HexfuseError(f"cannot read ORT profile {path}: {type(e).__name__}") from None
    runs: list[list[dict]] = []
    executors = set()
    for e in events:
        if e.get("cat") == "Session" and e.get("name") == "model_run":
            runs.append([])
        elif e.get("cat") == "Session" and "Executor" in e.get("name", ""):
            executors.add(e["name"])
    # Node events come before their model_run event; group them by run start time instead.
    node_ev = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    run_starts = sorted(e["ts"] for e in events if e.get("cat") == "Session" and e.get("name") == "model_run")
    if not node_ev:
        raise HexfuseError(f"ORT profile {path} holds no node events")
    last_start = run_starts[-1] if run_starts else min(e["ts"] for e in node_ev)
    last = [e for e in node_ev if e["ts"] >= last_start]
    t0 = min(e["ts"] for e in last)
    nodes = [{"name": e["name"][: -len("_kernel_time")], "op_type": e.get("args", {}).get("op_name", ""),
              "start": float(e["ts"] - t0), "duration": float(e["dur"]),
              "provider": e.get("args", {}).get("provider", ""), "tid": e.get("tid")} for e in last]
    nodes.sort(key=lambda n: n["start"])
    return {"runs": len(run_starts), "nodes": nodes, "executors": sorted(executors)}

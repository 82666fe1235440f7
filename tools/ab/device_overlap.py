"""`hexfuse ab --import`: engine overlap per fused node, from the profiles run_ab.py collected (issue 44).

Per run of the bundle, from ``profiles/optrace/<run>/`` (device_trace.py reads the formats):

1. ``chrometrace.json``: QNN's per-thread timeline of that run. run_ab.py writes it on the device when
   QNN's profile viewer is there; else this module writes it into the report folder when QNN_SDK_ROOT
   has the viewer and its optrace reader (x86), from ``*_qnn.log`` (the EP's binary profile log) and the
   prepare's ``*_schematic.bin``;
2. without it, the QNN EP CSV of the run: durations only, so the run is listed as "no per-thread
   timestamps" with the command that would make the timeline;
3. ONNX Runtime's own profile (``ort_profile*.json``): the host's view of the same runs (one interval
   for the whole QNN partition), kept beside for the wall time.

Simulator results are read the same way and flagged: their times are host-driven, not the device's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.graph_passes.load.io import write_atomic

from . import device_trace as dt

TIMELINE = "chrometrace.json"
VIEWER_CONFIG = {"htp_json": False, "runtrace": False, "memory_info": False,
                 "enable_input_output_flow_events": False, "enable_sequencer_flow_events": False}


def _viewer() -> tuple[Path, Path] | None:
    """QNN's profile viewer and its optrace reader for this workstation (x86 Linux SDK), if present."""
    root = os.environ.get("QNN_SDK_ROOT")
    if not root:
        return None
    viewer = Path(root) / "bin" / "x86_64-linux-clang" / "qnn-profile-viewer"
    reader = Path(root) / "lib" / "x86_64-linux-clang" / "libQnnHtpOptraceProfilingReader.so"
    return (viewer, reader) if viewer.is_file() and reader.is_file() else None


def viewer_command(log: str, schematic: str, output: str, config: str = "config.json") -> str:
    return (f"qnn-profile-viewer --config {config} --reader libQnnHtpOptraceProfilingReader.so "
            f"--input_log {log} --schematic {schematic} --output {output}")


def _decode(log: Path, schematic: Path, out: Path) -> Path | None:
    tools = _viewer()
    if tools is None:
        return None
    viewer, reader = tools
    config = out.with_name(out.stem + "_viewer_config.json")
    write_atomic(config, json.dumps(VIEWER_CONFIG).encode())
    env = dict(os.environ, LD_LIBRARY_PATH=f"{reader.parent}:{os.environ.get('LD_LIBRARY_PATH', '')}")
    done = subprocess.run([str(viewer), "--config", str(config), "--reader", str(reader), "--input_log", str(log),
                           "--schematic", str(schematic), "--output", str(out)],
                          capture_output=True, text=True, timeout=600, env=env)
    return out if done.returncode == 0 and out.is_file() else None


def _first(folder: Path, pattern: str) -> Path | None:
    found = sorted(folder.glob(pattern), key=lambda p: p.stat().st_size)
    return found[-1] if found else None


def _run_trace(folder: Path, key: str, simulator: bool, out_dir: Path) -> tuple[dt.DeviceTrace | None, str]:
    """The per-thread trace of one run, or the CSV-only trace and what to do to get one."""
    timeline = folder / TIMELINE
    if timeline.is_file():
        return dt.read_chrometrace(timeline, simulator), ""
    log, schematic = _first(folder, "*_qnn.log"), _first(folder, "*_schematic.bin")
    if log is not None and schematic is not None:
        decoded = _decode(log, schematic, out_dir / f"chrometrace_{key}.json")
        if decoded is not None:
            return dt.read_chrometrace(decoded, simulator), ""
        how = ("set QNN_SDK_ROOT to an SDK with bin/x86_64-linux-clang/qnn-profile-viewer, or run "
               f"`{viewer_command(log.name, schematic.name, TIMELINE)}` in {folder}")
    elif log is not None:
        how = (f"{folder.name} has the QNN log but no prepare schematic: the context was prepared elsewhere; rerun "
               "run_ab.py with --from onnx (the prepare then writes the schematic beside the log)")
    else:
        how = f"{folder} holds no QNN profile log (*_qnn.log): profiling_level=optrace did not run"
    csv = folder / "profile.csv"
    if csv.is_file():
        return dt.DeviceTrace(str(csv), "qnn_csv", (), False, simulator, "cycles",
                              ("per-node durations only",)), how
    return None, how


def collect(folder: Path, res: dict, fused_m, out_dir: Path) -> dict:
    """The report's `device_overlap` section (and its PNGs in out_dir); lines to lead the summary."""
    from .models import fused_nodes

    simulator = bool(res.get("platform", {}).get("simulator"))
    fused = [(n.name, n.op_type) for n in fused_nodes(fused_m)]
    optrace = res.get("profiles", {}).get("optrace", {})
    detailed = res.get("profiles", {}).get("detailed", {})
    runs, hints, ort, predicted = [], {}, {}, {}
    for run in res["runs"]:
        key = run["key"]
        entry = optrace.get(key)
        if entry is None:
            hints[key] = "no optrace profile of this run (run_ab.py --levels must include optrace)"
            continue
        rdir = folder / entry["dir"]
        try:
            trace, how = _run_trace(rdir, key, simulator, out_dir)
        except HexfuseError as exc:
            trace, how = None, str(exc)
        if how:
            hints[key] = how
        accel = dt.accelerator_us(rdir / "profile.csv")
        if not accel and key in detailed:
            accel = dt.accelerator_us(folder / detailed[key]["dir"] / "profile.csv")
        if trace is not None:
            runs.append(dt.run_overlap(key, trace, fused if run["role"] == "fused" else [], accel))
            if run["role"] == "fused":
                predicted[key] = _schedule_says(rdir)
        ort_file = _first(rdir, "ort_profile*.json")
        if ort_file is not None:
            try:
                host = dt.read_ort_profile(ort_file, simulator)
                ort[key] = {"file": ort_file.name, "qnn_partition_us": sum(o.end - o.start for o in host.ops
                                                                          if "QNN" in o.lane),
                            "nodes": len(host.ops)}
            except HexfuseError as exc:
                ort[key] = {"file": ort_file.name, "error": str(exc)}
    pictures = {}
    for r in runs:
        for node in r.nodes:
            pair = next(f for f in fused if f[0] == node.node)
            name = f"overlap_{r.key}_{len(pictures)}.png"
            write_atomic(out_dir / name, dt.window_png(r.trace, node, pair))
            pictures.setdefault(r.key, {})[node.node] = name
    lines = dt.table_lines(runs, predicted)
    for key, how in hints.items():
        lines.append(f"  {key}: {how}")
    for r in runs:
        if r.trace.per_thread and not r.nodes and fused and r.key in predicted:  # a fused run, nothing attributed
            lines.append(f"  {r.key}: no op of the timeline was attributed to a fused node (op args: "
                         f"{', '.join(r.trace.arg_keys[:8]) or 'none'}; docs/device.md section 5)")
    for r in runs:  # no timestamps: the prepare's schedule is all there is (structure, not time)
        for node, says in (predicted.get(r.key, {}) if not r.trace.per_thread else {}).items():
            lines.append(f"  {r.key}: {node}: the schedule says {says} (no timestamps to check it)")
    for key, host in ort.items():
        if "qnn_partition_us" in host:
            lines.append(f"  {key}: ONNX Runtime's profile: the QNN partition took {host['qnn_partition_us']:.0f} us "
                         f"on the host's clock (last run)" + (" (simulator)" if simulator else ""))
    if pictures:
        lines.append("  pictures (one lane per hardware thread, the fused node's window): "
                     + ", ".join(sorted({p for d in pictures.values() for p in d.values()})[:4])
                     + (" ..." if sum(len(d) for d in pictures.values()) > 4 else ""))
    return {"simulator": simulator, "runs": dt.to_json(runs), "hints": hints, "pictures": pictures,
            "ort_profile": ort, "lines": lines}


def _schedule_says(folder: Path) -> dict[str, str]:
    """Per fused node, what the prepare's schematic says (the happens-before graph of QNN's run lists):
    how many of its task ops are unordered with one of its own HMX ops."""
    from hexfuse.tools.optrace import fused_node_schedules, read_schematic

    schematic = _first(folder, "*_schematic.bin")
    if schematic is None:
        return {}
    try:
        nodes = fused_node_schedules(read_schematic(schematic))
    except (HexfuseError, KeyError, ValueError, TypeError):  # an optional column: never the import's failure
        return {}
    return {n.node: (f"may overlap: {n.in_window}/{len(n.tasks)} task ops unordered with own HMX"
                     if n.in_window else "ordered: no task op beside its own HMX op") for n in nodes}


def markdown(section: dict) -> list[str]:
    L = ["## Engine overlap (per-thread timestamps)", ""]
    if section["simulator"]:
        L += ["**x86 HTP simulator: the times below are host-driven, not the device's.**", ""]
    L += ["```", *section["lines"], "```", ""]
    for key, pics in section["pictures"].items():
        for node, name in pics.items():
            L.append(f"- {key} `{node}`: ![{node}]({name})")
    return L + [""] if section["pictures"] else L

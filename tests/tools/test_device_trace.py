"""Engine overlap from per-thread timestamps (tools/ab/device_trace.py, device_overlap.py; issue 44).

A synthetic QNN optrace chrometrace with known intersections is read back exactly (a task op sliced over
two HVX threads, three HVX threads, nested events, process-track duplicates); `hexfuse ab --import` on a
bundle's results leads with the per-fused-node table and draws the node's window; the simulator's own
optrace (run_ab.py on x86, no op package needed) is read end to end and flagged as not the device's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from hexfuse.cli import main as hexfuse_main
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.ab import device_trace as dt
from tests.tools.test_device import _fabricate, made, pair  # noqa: F401 (fixtures)

ROOT = Path(__file__).resolve().parents[2]
HMX, HVX0, HVX1, HVX2 = 256, 512, 513, 514


def _meta(tid: int, name: str, pid: int = 1) -> dict:
    return {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}}


def _op(tid: int, ts: float, dur: float, kernel: str, node: str, pid: int = 1) -> dict:
    return {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": kernel.split("::")[-1],
            "args": {"HTP Op Type": kernel, "QNN Op Name": node, "Dominant Path Cycles": int(dur * 1000)}}


def synthetic_events(n0: str = "hexfuse/n0", t0: str = "HexFuse_0_abc", n1: str = "hexfuse/n1",
                     t1: str = "HexFuse_1_def") -> list[dict]:
    """Two fused nodes and some of QNN's own ops. Known answers:
    n0: task op T = [100,160) u [120,200) = [100,200) -> 100; own HMX M = [150,170) u [190,260) -> 90;
        T n M = [150,170) + [190,200) = 30 -> 30 % of the task op. (another node's HMX op at [160,180)
        intersects T too, but is not n0's own.)
    n1: T = [300,350), M = [400,450): 0.
    graph: HVX = [0,50) u [100,200) u [300,350) = 200; HMX = [150,180) u [190,260) u [400,450) = 150;
        HVX n HMX = 30 + 10 = 40 -> 26.67 % of HMX; 3 HVX threads."""
    ev = [_meta(HMX, "HMX"), _meta(HVX0, "HVX Thread 0"), _meta(HVX1, "HVX Thread 1"), _meta(HVX2, "HVX Thread 2"),
          {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "HTP"}}]
    ops = [
        _op(HVX2, 0, 50, "q::Softmax", "softmax"),
        _op(HVX0, 100, 60, f"HexFuse::{t0}__t1", n0),  # task slice a
        _op(HVX0, 110, 20, f"HexFuse::{t0}__t1", n0),  # nested inside slice a
        _op(HVX1, 120, 80, f"HexFuse::{t0}__t1", n0),  # task slice b, another HVX thread
        _op(HMX, 150, 20, "q::ConvLayer_s1.opt", n0),
        _op(HMX, 160, 20, "q::ConvLayer_s1.opt", "other_conv"),
        _op(HMX, 190, 70, "q::ConvLayer_s1.opt", n0 + "_mm"),  # an op QNN expanded from n0
        _op(HVX2, 300, 50, f"HexFuse::{t1}__t0", n1),
        _op(HMX, 400, 50, "q::ConvLayer_s1.opt", n1),
    ]
    ev += ops
    ev.append(dict(ops[3]))  # an exact duplicate on the same thread track
    ev += [dict(o, pid=0, tid=0) for o in ops]  # the process-level track: the same ops, no thread
    ev += [dict(o, pid=0) for o in ops]  # and again under pid 0 with the thread's id, no thread name
    return ev


def _write(path: Path, events: list[dict]) -> Path:
    path.write_text(json.dumps({"traceEvents": events}))
    return path


def test_interval_algebra() -> None:
    assert dt.union([(5, 8), (0, 2), (2, 3), (6, 7), (9, 9)]) == [(0, 3), (5, 8)]  # touching merge, nested, empty
    assert dt.intersect([(0, 10), (20, 30)], [(5, 25), (28, 40)]) == [(5, 10), (20, 25), (28, 30)]
    assert dt.measure(dt.intersect([(0, 1)], [(1, 2)])) == 0
    assert dt.measure([(0, 4), (1, 2), (3, 6)]) == 6


def test_synthetic_trace_reads_back_exactly(tmp_path: Path) -> None:
    trace = dt.read_chrometrace(_write(tmp_path / "chrometrace.json", synthetic_events()))
    assert trace.per_thread and not trace.simulator and len(trace.ops) == 9  # duplicates dropped
    assert trace.lanes() == ["HMX", "HVX Thread 0", "HVX Thread 1", "HVX Thread 2"]
    run = dt.run_overlap("b4", trace, [("hexfuse/n0", "HexFuse_0_abc"), ("hexfuse/n1", "HexFuse_1_def")])
    n0, n1 = run.nodes
    assert (n0.task_busy, n0.hmx_busy, n0.overlap, n0.percent_of_task) == (100, 90, 30, 30.0)
    assert (n0.window, n0.task_ops, n0.hmx_ops) == ((100, 260), 1, 2)
    assert (n1.task_busy, n1.hmx_busy, n1.overlap, n1.percent_of_task) == (50, 50, 0, 0.0)
    g = run.graph
    assert (g.hvx_busy, g.hmx_busy, g.overlap, g.hvx_threads, g.span) == (200, 150, 40, 3, (0, 450))
    assert g.percent_of_hmx == pytest.approx(100 * 40 / 150)
    lines = dt.table_lines([run], {"b4": {"hexfuse/n0": "may overlap"}})
    row = next(line for line in lines if "hexfuse/n0" in line)
    assert row.split()[2:6] == ["100.0", "90.0", "30.0", "30.0%"] and row.endswith("may overlap")
    # without QNN op names the task op is found by its kernel's op type (unique per node), HMX ops are not
    bare = [dict(e, args={"HTP Op Type": e["args"]["HTP Op Type"]}) if e.get("ph") == "X" else e
            for e in synthetic_events()]
    anonymous = dt.node_overlaps(dt.read_chrometrace(_write(tmp_path / "bare.json", bare)),
                                 [("hexfuse/n0", "HexFuse_0_abc")])
    assert anonymous[0].task_busy == 100 and anonymous[0].hmx_busy == 0


def test_thread_ids_stand_in_for_thread_names_and_bad_traces_are_refused(tmp_path: Path) -> None:
    events = [e for e in synthetic_events() if e.get("ph") != "M" and e.get("pid") == 1]
    trace = dt.read_chrometrace(_write(tmp_path / "t.json", events))
    assert {o.engine for o in trace.ops} == {"hmx", "hvx"} and dt.graph_overlap(trace).overlap == 40
    assert len(trace.ops) == 9 and dt.graph_overlap(trace).hvx_threads == 3
    with pytest.raises(HexfuseError, match="no op events on a hardware thread"):
        dt.read_chrometrace(_write(tmp_path / "cpu.json", [_op(7, 0, 10, "x", "y")]))
    (tmp_path / "junk.json").write_text("{")
    with pytest.raises(HexfuseError, match="is not JSON"):
        dt.read_chrometrace(tmp_path / "junk.json")


def test_unit_check_tells_a_cycle_valued_trace(tmp_path: Path) -> None:
    trace = dt.read_chrometrace(_write(tmp_path / "c.json", synthetic_events()))
    assert "microseconds" in dt.unit_check(trace, [440.0, 460.0]) and "not" not in dt.unit_check(trace, [450.0])
    assert "not microseconds" in dt.unit_check(trace, [0.35])  # 450 'us' of trace for 0.35 us of accelerator
    flagged = dt.read_chrometrace(tmp_path / "c.json", simulator=True)
    assert flagged.simulator and "not the device's" in flagged.notes[0]
    assert "NOT the device's" in dt.table_lines([dt.run_overlap("b2", flagged, [])])[0]


# --- hexfuse ab --import on a bundle's results -----------------------------------------------------
def test_import_leads_with_the_overlap_table_and_draws_the_window(made: Path, tmp_path: Path,  # noqa: F811
                                                                   capsys) -> None:
    results = _fabricate(made)
    fused = onnx.load(str(made / "models" / "fused_serial0.onnx"))
    nodes = [(n.name, n.op_type) for n in fused.graph.node if n.domain == "hexfuse"]
    (a, ta), (b, tb) = nodes[0], nodes[1]
    serial = synthetic_events(a, ta, b, tb)  # b3: make n0's task op run after its own HMX work
    for e in serial:
        if e.get("ph") == "X" and "__t1" in e["name"]:
            e["ts"] += 200
    for key, events in (("b2_original_best", synthetic_events()),
                        ("b3_fused_serial", serial), ("b4_fused_concurrent", synthetic_events(a, ta, b, tb))):
        _write(results / "profiles" / "optrace" / key / "chrometrace.json", events)
    report = tmp_path / "report"
    assert hexfuse_main(["ab", "--import", str(results), "-o", str(report)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "hexfuse: per fused node: task op (HVX) ∩ its own HMX ops", err[:3]
    assert err.index(next(line for line in err if "equivalence PASS" in line)) > 5
    rep = json.loads((report / "report.json").read_text())
    sec = rep["device_overlap"]
    b4 = {n["node"]: n for n in sec["runs"]["b4_fused_concurrent"]["fused_nodes"]}
    assert (b4[a]["overlap_us"], b4[a]["percent_of_task"], b4[b]["overlap_us"]) == (30, 30.0, 0)
    b3 = {n["node"]: n for n in sec["runs"]["b3_fused_serial"]["fused_nodes"]}
    assert b3[a]["overlap_us"] == 0 and b3[a]["task_us"] == 100
    assert sec["runs"]["b2_original_best"]["fused_nodes"] == []
    assert sec["runs"]["b2_original_best"]["graph"]["overlap_us"] == 40 and not sec["simulator"]
    picture = report / sec["pictures"]["b4_fused_concurrent"][a]
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 5000
    assert picture.name in rep["files"]
    md = (report / "report.md").read_text()
    assert md.index("## Engine overlap") < md.index("## Baselines") and f"]({picture.name})" in md


@pytest.mark.skipif(__import__("importlib").util.find_spec("onnxruntime_qnn") is None,
                    reason="onnxruntime-qnn is not installed (the x86 HTP simulator)")
def test_the_simulators_own_optrace_is_read_end_to_end_and_flagged(tmp_path: Path) -> None:
    fused = tmp_path / "g.fused.onnx"
    model = ROOT / "models" / "gptj_block_qdq.onnx"
    assert hexfuse_main(["fuse", str(model), "-o", str(fused), "--as-designed", "--no-verify"]) == 0
    bundle = tmp_path / "bundle"
    assert hexfuse_main(["bundle", str(model), str(fused), "-o", str(bundle), "--target", "sm8650", "--no-build"]) == 0
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "QNN_SDK_ROOT")}
    run = subprocess.run([sys.executable, "-I", str(bundle / "run_ab.py"), "--from", "onnx", "--iters", "2", "--warmup",
                          "0", "--profile-runs", "1", "--levels", "optrace"], capture_output=True, text=True,
                         timeout=600, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "engine timeline of b2_original_best: QNN log yes, schematic yes" in run.stderr
    res = json.loads((bundle / "results" / "results.json").read_text())
    timeline = res["engine_timeline"]["b2_original_best"]
    assert timeline["qnn_log"] and timeline["schematic"] and timeline["ort_profile"] and not timeline["chrometrace"]
    assert "profile viewer" in timeline["missing"]
    done = subprocess.run([sys.executable, "-m", "hexfuse", "ab", "--import", str(bundle / "results"), "-o",
                           str(tmp_path / "report")], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stderr.startswith("hexfuse: x86 HTP simulator: these times are host-driven, NOT the device's")
    sec = json.loads((tmp_path / "report" / "report.json").read_text())["device_overlap"]
    assert sec["simulator"] and sec["runs"]["b2_original_best"]["per_thread"] is False
    assert sec["runs"]["b2_original_best"]["source"] == "qnn_csv"
    assert "qnn-profile-viewer" in sec["hints"]["b2_original_best"]
    assert sec["ort_profile"]["b2_original_best"]["qnn_partition_us"] > 0

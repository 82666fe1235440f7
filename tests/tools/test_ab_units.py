"""Unit tests of the pieces: statistics, profile parsing, timeline analysis, presets, serial variants."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from ab_testmodels import make_fused, make_original

from hexfuse.graph_passes.cost import profile_rows
from hexfuse.tools.ab import baselines, compare, latency, models, presets, profile, timeline

CSV = """Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
0,FINALIZE,9645,US,BACKEND,ROOT,QNN (finalize) time
0,BACKEND,11483,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,3707,CYCLES,BACKEND,SUB-EVENT,Input OpId_2 (cycles)
0,NODE,5152,CYCLES,BACKEND,SUB-EVENT,softmax2:OpId_16 (cycles)
0,NODE,1449,CYCLES,BACKEND,SUB-EVENT,mm0:OpId_22 (cycles)
0,BACKEND,6848,US,BACKEND,ROOT,Accelerator (execute) time
0,BACKEND,9000,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,3000,CYCLES,BACKEND,SUB-EVENT,Input OpId_2 (cycles)
0,NODE,5000,CYCLES,BACKEND,SUB-EVENT,softmax2:OpId_16 (cycles)
0,NODE,1000,CYCLES,BACKEND,SUB-EVENT,mm0:OpId_22 (cycles)
0,BACKEND,5000,US,BACKEND,ROOT,Accelerator (execute) time
"""


def test_parse_qnn_csv(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text(CSV)
    d = profile.parse_qnn_csv(p)
    assert d["runs"] == 2 and d["accelerator_cycles"] == [11483.0, 9000.0]
    assert d["nodes"] == [("Input", 3353.5), ("softmax2", 5076.0), ("mm0", 1224.5)]


def test_parse_qnn_csv_without_nodes(tmp_path):
    p = tmp_path / "p.csv"
    p.write_text(CSV.splitlines()[0] + "\n0,FINALIZE,9645,US,BACKEND,ROOT,QNN (finalize) time\n")
    with pytest.raises(Exception, match="no per-node rows"):
        profile.parse_qnn_csv(p)


def test_paired_speedup_ci_covers_truth():
    rng = np.random.default_rng(1)
    new = 1.0 + 0.05 * rng.random(200)
    ref = 2.0 * new + 0.02 * rng.standard_normal(200)
    sp = latency.paired_speedup(ref, new, seed=7)
    assert sp["ci95"][0] < 2.0 < sp["ci95"][1] and sp["significant"]
    assert latency.paired_speedup(ref, new, seed=7) == sp  # seeded
    same = latency.paired_speedup(new, new.copy(), seed=7)
    assert same["speedup"] == 1.0 and not same["significant"]


def test_stats_percentiles():
    s = latency.stats(np.arange(1, 101, dtype=float))
    assert s["median_ms"] == 50.5 and s["p90_ms"] == pytest.approx(90.1) and s["p99_ms"] == pytest.approx(99.01)


def test_interleaving_rotates_order():
    order: list[str] = []
    runners = {k: (lambda k=k: order.append(k)) for k in "AB"}
    latency.time_interleaved(runners, iters=4, warmup=0, progress=latency.Progress(quiet=True))
    assert order == ["A", "B", "B", "A", "A", "B", "B", "A"]


def test_compare_metrics():
    a = [np.array([1.0, 2.0, -3.0], np.float32)]
    r = compare.compare_outputs(["y"], a, [a[0] * 1.01], atol=1e-4, rtol=1e-3, min_cosine=0.9999)
    row = r["outputs"][0]
    assert not r["passed"] and row["max_rel_err"] == pytest.approx(0.01, rel=1e-3)
    assert row["max_abs_err"] == pytest.approx(0.03, rel=1e-3) and row["cosine"] == pytest.approx(1.0)
    assert compare.compare_outputs(["y"], a, [a[0]], 1e-4, 1e-3, 0.9999)["passed"]
    flipped = compare.compare_outputs(["y"], a, [-a[0]], 10.0, 10.0, 0.9999)
    assert not flipped["passed"] and flipped["outputs"][0]["cosine"] == pytest.approx(-1.0)


def test_compare_integers_exactly_and_special_values_by_place():
    ids = np.array([1500, 7], np.int64)
    assert not compare.compare_outputs(["ids"], [ids], [ids + [1, 0]], 1e-4, 1e-3, 0.9999)["passed"]
    big = np.array([2**60], np.int64)
    assert not compare.compare_outputs(["big"], [big], [big + 1], 0.0, 0.0, 0.9999)["passed"]
    special = np.array([np.nan, -np.inf, 1.0, np.inf], np.float32)
    assert compare.compare_outputs(["s"], [special], [special.copy()], 1e-4, 1e-3, 0.9999)["passed"]
    moved = np.array([1.0, -np.inf, np.nan, np.inf], np.float32)
    assert not compare.compare_outputs(["s"], [special], [moved], 1e-4, 1e-3, 0.9999)["passed"]
    zeros = np.zeros(4, np.float32)  # no direction to compare: within atol is enough
    assert compare.compare_outputs(["z"], [zeros], [zeros + 1e-9], 1e-4, 1e-3, 0.9999)["passed"]
    assert not compare.compare_outputs(["z"], [zeros], [zeros + 1e-3], 1e-4, 1e-3, 0.9999)["passed"]


@pytest.mark.parametrize("op,eng", [("MatMul", "matrix"), ("Conv2d", "matrix"), ("FullyConnected", "matrix"),
                                    ("Softmax", "vector"), ("ElementWiseAdd", "vector"), ("LRN", "vector"),
                                    ("PoolMax2d", "vector"), ("Transpose", "vector"), ("Concat", "vector"),
                                    ("Input", "dma"), ("HexFuse_g0", "fused"), ("Frobnicate", "other")])
def test_engine_classes(op, eng):
    assert profile_rows.engine_of_op(op) == eng


def test_timeline_finds_matrix_idle_while_ready():
    """Original serial order: softmax2 (vector, 5000) runs first though mm0 (matrix) was ready at 0."""
    rows = [{"name": "softmax2", "duration": 5000.0, "start": None},
            {"name": "add3", "duration": 500.0, "start": None},
            {"name": "mm0", "duration": 1000.0, "start": None},
            {"name": "relu1", "duration": 300.0, "start": None}]
    tl = timeline.build(rows, make_original(), "cycles")
    pe = tl["per_engine"]
    assert tl["span"] == 6800.0 and pe["matrix"]["busy"] == 1000.0
    assert pe["matrix"]["idle_while_ready_work_waited"] == 5500.0
    assert pe["vector"]["idle_while_ready_work_waited"] == 0.0  # each vector op started once ready
    # matrix branch hides under softmax2; relu1 still queues behind add3 on the vector lane
    assert tl["ideal_engine_parallel_span"] == 5800.0
    ev = {e["name"]: e for e in tl["events"]}
    assert ev["mm0"]["engine"] == "matrix" and ev["relu1"]["start"] == 6500.0


def test_timeline_fused_inlined_rows_have_unknown_inputs():
    rows = [{"name": "MatMul_3", "duration": 10.0, "start": 0.0},
            {"name": "relu1", "duration": 5.0, "start": 50.0}]
    tl = timeline.build(rows, make_fused(), "us")
    assert tl["events_with_known_inputs"] == 0  # relu1 reads the fused node, which ran inlined
    assert tl["per_engine"]["vector"]["idle_while_ready_work_waited"] == 0.0
    assert tl["events"][0]["op_type"] == "MatMul"


def test_trace_events_layout():
    tl = timeline.build([{"name": "mm0", "duration": 3.0, "start": None}], make_original(), "cycles")
    tr = timeline.trace_events({"orig": tl, "fused": tl})["traceEvents"]
    xs = [e for e in tr if e["ph"] == "X"]
    assert {e["pid"] for e in xs} == {1, 2}
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in tr if e["name"] == "thread_name"}
    assert all(names[(e["pid"], e["tid"])] == "matrix" for e in xs)


def test_shipped_presets_are_valid():
    names = presets.preset_names()
    assert {"htp_sim", "htp_v73_burst", "htp_v75_burst", "htp_v79_burst"} <= set(names)
    socs = {"htp_v73_burst": ("43", "73"), "htp_v75_burst": ("57", "75"), "htp_v79_burst": ("69", "79")}
    for n, (soc, arch) in socs.items():
        p = presets.load_preset(n)
        assert (p.provider_options["soc_model"], p.provider_options["htp_arch"]) == (soc, arch)
        assert p.disable_cpu_ep_fallback
    assert presets.load_preset(None).name == "htp_sim"


def test_serial_variants_and_plan(tmp_path):
    f = tmp_path / "fused.onnx"
    onnx.save(make_fused(serial=0), str(f))
    pl = baselines.plan("qnn", "o.onnx", str(f), ["HexFuse_g0"], tmp_path, presets.load_preset("htp_sim"),
                        "/x/libHexFuse.so", "HexFuse")
    runs = {r.key: r for r in pl.runs}
    assert set(runs) == {"b2_original_best", "b3_fused_serial", "b4_fused_concurrent"}
    for key, want in (("b3_fused_serial", 1), ("b4_fused_concurrent", 0)):
        m = onnx.load(runs[key].model_path)
        (node,) = models.fused_nodes(m)
        assert [a.i for a in node.attribute if a.name == "serial"] == [want]
        assert runs[key].provider_options["op_packages"] == "HexFuse_g0:/x/libHexFuse.so:HexFuseInterfaceProvider:CPU"
        onnx.checker.check_model(m)
    assert "op_packages" not in runs["b2_original_best"].provider_options
    assert pl.primary_fused == "b4_fused_concurrent"
    names = [g[0] for g in baselines.gain_pairs(set(runs) | {"b1_original_seq"})]
    assert "entry_merge_gain_1_to_3" in names and "overlap_gain_3_to_4" in names


def test_serial_variant_needs_fused_node(tmp_path):
    o = tmp_path / "o.onnx"
    onnx.save(make_original(), str(o))
    with pytest.raises(Exception, match="no fused"):
        models.write_serial_variant(str(o), 1, Path(tmp_path / "x.onnx"))


def test_progress_step_keeps_talking_during_a_slow_step(capsys):
    import time
    prog = latency.Progress(quiet=False)
    with prog.step("creating session 1/1", force=True, every=0.05):
        time.sleep(0.2)
    err = capsys.readouterr().err
    assert "hexfuse ab: creating session 1/1" in err and "hexfuse ab: still creating session 1/1 (0 s)" in err
    with latency.Progress(quiet=True).step("silent", force=True, every=0.01):
        time.sleep(0.05)
    assert capsys.readouterr().err == ""

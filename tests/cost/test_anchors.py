"""Real-device anchors (issue 20): the published table, the whole-model latency, its fit, and the two
calibration inputs added for it (a published table, an AI Hub profile JSON). No torch: the models are
built here with onnx.helper or are the bundled ones."""

from __future__ import annotations

import dataclasses

import csv
import json
import math
import re
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.cli import main
from hexfuse.graph_passes.cost import load_target
from hexfuse.graph_passes.cost.calibrate import (
    LatencyRow,
    ModelCase,
    held_out_latencies,
    fit_latencies,
    fit_profile,
    latency_errors,
    model_latency,
    model_nodes,
    node_ns,
    parse_hub_profile,
    read_published,
    _unit_costs,
)
from hexfuse.graph_passes.cost.target import TARGETS_DIR, target_to_dict
from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.anchors import bench
from hexfuse.tools.anchors.published import DEVICES, MODELS, TABLE, read_table
from tests.cost.specs import estimated

ROOT = Path(__file__).resolve().parents[2]


# -- models --------------------------------------------------------------------------------------


def _conv(name, x, cin, cout, k, rng, inits, group=1):
    w = f"{name}.w"
    inits.append(numpy_helper.from_array(rng.standard_normal((cout, cin // group, k, k)).astype(np.float32) * 0.1, w))
    return helper.make_node("Conv", [x, w], [f"{name}.y"], name=name, pads=[k // 2] * 4, group=group)


def _save(path: Path, nodes, inits, size: int, out: str, out_shape) -> Path:
    graph = helper.make_graph(nodes, path.stem, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, size, size])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, out_shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


def convnet(path: Path, size: int) -> Path:
    """Conv -> Relu -> MaxPool -> Conv -> Relu -> GlobalAveragePool: matrix work with small vector steps."""
    rng, inits = np.random.default_rng(size), []
    nodes = [_conv("/stem/conv", "x", 8, 32, 3, rng, inits),
             helper.make_node("Relu", ["/stem/conv.y"], ["r0"], name="/stem/relu"),
             helper.make_node("MaxPool", ["r0"], ["p0"], name="/stem/pool", kernel_shape=[2, 2], strides=[2, 2]),
             _conv("/body.0/conv", "p0", 32, 64, 3, rng, inits),
             helper.make_node("Relu", ["/body.0/conv.y"], ["r1"], name="/body.0/relu"),
             helper.make_node("GlobalAveragePool", ["r1"], ["y"], name="/head/gap")]
    return _save(path, nodes, inits, size, "y", [1, 64, 1, 1])


def branchy(path: Path, size: int) -> Path:
    """Two conv branches -> Concat -> Sigmoid gate -> depthwise conv: vector-heavy."""
    rng, inits = np.random.default_rng(100 + size), []
    nodes = [_conv("a", "x", 8, 16, 1, rng, inits), _conv("b", "x", 8, 16, 3, rng, inits),
             helper.make_node("Concat", ["a.y", "b.y"], ["c"], name="cat", axis=1),
             helper.make_node("Sigmoid", ["c"], ["s"], name="gate"),
             helper.make_node("Mul", ["c", "s"], ["m"], name="mul"),
             _conv("dw", "m", 32, 32, 3, rng, inits, group=32),
             helper.make_node("Add", ["dw.y", "m"], ["y"], name="res")]
    return _save(path, nodes, inits, size, "y", [1, 32, size, size])


TRUTH = {"dispatch_ns": 0.4, "hvx_launch_ns": 0.5, "hmx_fp16_macs_per_cycle": 1.6}  # x the base's value
TRUE_FACTORS = {"elementwise": 0.3}  # a class both architectures run (a factor needs LATENCY_MIN_MODELS models)


def _truth(base):
    return replace(base, factors=TRUE_FACTORS, **{k: getattr(base, k) * v for k, v in TRUTH.items()})


@pytest.fixture(scope="module")
def small_rows(tmp_path_factory):
    """Two small architectures at two sizes each; 'published' = their latency on a known true target."""
    folder = tmp_path_factory.mktemp("anchors")
    base = estimated("sm8650")  # no factors yet: the truth differs from it in known places
    truth = _truth(base)
    rows = []
    for build in (convnet, branchy):
        for size in (32, 64):
            path = build(folder / f"{build.__name__}_{size}.onnx", size)
            case = ModelCase.load(f"{build.__name__}_{size}", "float", path)
            rows.append(LatencyRow(case, model_latency(case, truth).serial_ns / 1e6))
    return base, truth, rows, folder


# -- the published table ---------------------------------------------------------------------------


def test_published_table_has_provenance_for_every_row():
    rows = read_table(TABLE)
    assert len({r.model for r in rows}) >= 15
    assert {r.chipset for r in rows} == set(DEVICES)
    keys = [(r.model, r.chipset, r.precision) for r in rows]
    assert len(keys) == len(set(keys)), "one figure per model, chipset and precision"
    for r in rows:
        assert r.model in MODELS and r.arch == MODELS[r.model]
        assert r.device == DEVICES[r.chipset]
        assert re.fullmatch(r"[0-9a-f]{40}", r.commit), r
        assert re.fullmatch(r"j[0-9a-z]{8}", r.job_id), r  # AI Hub job ids
        assert r.runtime in ("onnx", "qnn_dlc")
        assert (r.runtime == "onnx") == (r.note == "") or r.note.startswith("no passed onnx"), r
        assert r.runtime == "onnx" or r.note, f"{r.model} {r.chipset}: qnn_dlc row must say why"
        assert 0 < r.npu_layers == r.layers, f"{r.model} {r.chipset} {r.precision}: not all layers on the NPU"
        assert 0.05 < r.milliseconds < 50 and r.qairt
    # w8a8 never runs slower than 3x its float figure on the same phone (the CPU-fallback jobs were left out)
    by = {(r.model, r.chipset, r.precision): r.milliseconds for r in rows}
    for (model, chipset, precision), ms in by.items():
        if precision == "w8a8" and (model, chipset, "float") in by:
            assert ms < 3 * by[model, chipset, "float"], (model, chipset)


def test_exporter_builds_the_architectures_the_table_names():
    zoo = pytest.importorskip("hexfuse.tools.anchors.zoo")  # imports without torch
    assert zoo.ARCHS == MODELS


def test_read_published_rejects_what_it_cannot_fit(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("model,chipset,precision\nresnet18,sm8650,float\n")
    with pytest.raises(HexfuseError, match="missing column 'milliseconds'"):
        read_published(bad)
    bad.write_text("model,chipset,precision,milliseconds\nresnet18,sm8650,float,fast\n")
    with pytest.raises(HexfuseError, match="line 2: milliseconds 'fast'"):
        read_published(bad)
    bad.write_text("model,chipset,precision,milliseconds\nresnet18,sm8650,int4,1.0\n")
    with pytest.raises(HexfuseError, match="precision 'int4'"):
        read_published(bad)


# -- the whole-model latency ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["googlenet.onnx", "googlenet_qdq.onnx"])
def test_model_latency_is_what_analyze_reports(name):
    from hexfuse.graph_passes.analysis.facts import Analysis
    from hexfuse.graph_passes.cost.scorer import CostScorer
    from hexfuse.graph_passes.cost.summary import summarize
    from hexfuse.graph_passes.load.model import load_model

    path = ROOT / "models" / name
    target = load_target("sm8650")
    case = ModelCase.load("googlenet", "float", path)
    summary = summarize(Analysis.of(load_model(path).inferred), (), CostScorer(target, as_designed=True))
    assert model_latency(case, target).serial_ns == pytest.approx(summary.serial_ns, rel=1e-9)
    faster = replace(target, dispatch_ns=target.dispatch_ns / 2)
    assert model_latency(case, faster).serial_ns < summary.serial_ns


def test_qdq_ports_are_priced_quantized():
    """A task's spec peels the DQ / Q at its boundary; QNN folds them into the port, so the port's wire
    encoding prices it: uint8 activations and static uint8 weights, not fp16."""
    from hexfuse.graph_passes.cost.opcost import Storage

    path = ROOT / "models" / "googlenet_qdq.onnx"
    case = ModelCase.load("g", "w8a8", path)
    ops = [op for _, op in case.tasks.values()]
    ports = [(op, t) for op in ops for t in op.inputs if t.wire is not None]
    assert ports
    sizes = {Storage(op).itemsize(t.name) for op, t in ports}
    assert sizes <= {1, 4} and 1 in sizes  # uint8 codes (int32 biases)
    weights = [(op, t) for op, t in ports if "weight" in t.name]
    assert weights and all(Storage(op).static(t.name) for op, t in weights)
    bare = [dataclasses.replace(op, inputs=tuple(dataclasses.replace(t, wire=None) for t in op.inputs)) for op in ops]
    target = load_target("sm8650")
    priced = sum(c.main_ns for op in ops for c in case.costs(op, target))
    as_float = sum(c.main_ns for op in bare for c in case.costs(op, target))
    assert priced < as_float


# -- the fit -------------------------------------------------------------------------------------


def test_fit_recovers_latencies_of_a_known_target(small_rows):
    base, truth, rows, _ = small_rows
    published = [r.milliseconds for r in rows]
    before = latency_errors([model_latency(r.case, base).serial_ns for r in rows], published)
    fit = fit_latencies(rows, base)
    after = latency_errors([fit.predict_ns(r.case) for r in rows], published)
    assert max(before) > 0.2  # the base target is off ...
    assert max(after) < min(0.1, max(before) / 4)  # ... and the fitted one reproduces every row (the ridge pulls a little)
    assert fit.predict_ns(rows[0].case) == pytest.approx(model_latency(rows[0].case, fit.target).serial_ns, rel=1e-9)
    assert fit.values()["factors.elementwise"] < 1.0  # moved towards the truth (0.3), not away


def test_held_out_predicts_every_row_without_its_model(small_rows):
    base, _, rows, _ = small_rows
    held = held_out_latencies(rows, base, k=2, iterations=4)
    assert sorted(held) == list(range(len(rows)))
    assert all(math.isfinite(v) and v > 0 for v in held.values())


def test_written_target_keeps_schema_and_folds(small_rows, tmp_path):
    base, _, rows, _ = small_rows
    chip = bench.Chipset("sm8650", base, [], [r.case for r in rows])
    chip.rows = [bench.Published(r.case.model, r.case.model, "Samsung Galaxy S24", "sm8650", "onnx", "float",
                                 r.milliseconds, "j000000000", "", "", 1, 1, "0" * 40) for r in rows]
    bench.run_chipset(chip, do_fit=True, folds=2, iterations=4)
    path = tmp_path / "sm8650.json"
    shutil.copy(TARGETS_DIR / "sm8650.json", path)
    before = json.loads(path.read_text())
    bench.write_target(chip, path, "table.csv")
    after = json.loads(path.read_text())
    assert after["folds"] == before["folds"]
    assert set(after) - set(before) <= {"factors"}
    loaded = load_target(path)
    assert loaded.sources["dispatch_ns"].startswith("fit: table.csv (4 rows, 4 models")
    assert loaded.dispatch_ns == pytest.approx(chip.result.target.dispatch_ns, abs=0.5)  # written as an integer


def test_calibrate_cli_fits_a_published_table(small_rows, tmp_path, capsys):
    base, _, rows, folder = small_rows
    table = folder / "mine.csv"
    with table.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["model", "chipset", "precision", "milliseconds", "onnx"])
        for r in rows:
            writer.writerow([r.case.model, "sm8650", "float", r.milliseconds, Path(r.case.path).name])
        writer.writerow(["absent", "sm8650", "float", 1.0, "absent.onnx"])  # counted, not fatal
    out = tmp_path / "mine.json"
    base_json = tmp_path / "base.json"
    base_json.write_text(json.dumps(target_to_dict(base)))
    assert main(["calibrate", "--published", str(table), "--target", str(base_json), "--chipset", "sm8650",
                 "-o", str(out)]) == 0
    fitted = load_target(out)
    assert fitted.sources["hvx_launch_ns"].startswith("fit: mine.csv")
    errors = latency_errors([model_latency(r.case, fitted).serial_ns for r in rows], [r.milliseconds for r in rows])
    assert max(errors) < 0.1
    assert "1 without a model file" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a profile and --published together make no sense
        raise SystemExit(main(["calibrate", "x.csv", "--published", str(table), "-o", str(tmp_path / "y.json")]))


# -- AI Hub profile JSON ------------------------------------------------------------------------------


def _hub_profile(path: Path, layers: list[dict], total_us: float) -> Path:
    """The dict qai-hub's ProfileJob.download_profile() returns (client.py _profile_pb_to_python_dict)."""
    path.write_text(json.dumps({
        "execution_summary": {"estimated_inference_time": total_us, "estimated_inference_peak_memory": 1 << 20,
                              "first_load_time": 90000, "warm_load_time": 5000, "compile_time": 0},
        "execution_detail": layers}))
    return path


def test_hub_profile_scales_layer_times_to_the_latency(tmp_path):
    path = _hub_profile(tmp_path / "p.json", [
        {"name": "a", "type": "Conv2d", "compute_unit": "NPU", "execution_time": 30, "execution_cycles": 30000},
        {"name": "b", "type": "ElementWiseAdd", "compute_unit": "NPU", "execution_time": 10},
        {"name": "folded", "type": "Relu", "compute_unit": "NPU", "execution_time": 0},
        {"name": "host", "type": "Cast", "compute_unit": "CPU", "execution_time": 50}], total_us=200)
    cycles, runs = parse_hub_profile(path, clock_ghz=1.0)
    assert runs == 1 and set(cycles) == {"a", "b"}
    assert sum(cycles.values()) == pytest.approx(200e3)  # ns at 1 GHz: the whole latency
    assert cycles["a"] == pytest.approx(3 * cycles["b"])
    path.write_text(json.dumps({"execution_summary": {"estimated_inference_time": 0}, "execution_detail": []}))
    with pytest.raises(HexfuseError, match="estimated_inference_time"):
        parse_hub_profile(path, 1.0)
    path.write_text("{not json")
    with pytest.raises(HexfuseError, match="not valid JSON"):
        parse_hub_profile(path, 1.0)


def test_calibrate_reads_a_hub_profile_with_qnn_names(small_rows, tmp_path, capsys):
    base, truth, rows, _ = small_rows
    model = Path(rows[1].case.path)  # convnet_64: '/stem/conv' etc., which QNN names '_stem_conv'
    nodes = model_nodes(model)
    layers, total = [], 0.0
    for name, cost in _unit_costs(nodes, base).items():
        ns = node_ns(cost, replace(truth, factors={}), truth.factor(cost.op_class))
        layers.append({"name": re.sub(r"[^0-9A-Za-z]+", "_", name).strip("_"), "type": cost.op_type,
                       "compute_unit": "NPU", "execution_time": ns / 1e3})
        total += ns / 1e3
    layers.append({"name": "_stem_relu_folded", "type": "Relu", "compute_unit": "NPU", "execution_time": 0})
    profile = _hub_profile(tmp_path / "hub.json", layers, total_us=total)
    fit = fit_profile(profile, model, base)
    assert not fit.skipped  # every NPU layer found its node under QNN's name
    assert fit.residual < 0.05
    out = tmp_path / "cal.json"
    base_json = tmp_path / "base.json"
    base_json.write_text(json.dumps(target_to_dict(base)))
    assert main(["calibrate", str(profile), "--model", str(model), "--target", str(base_json), "-o", str(out)]) == 0
    assert load_target(out).sources["dispatch_ns"].startswith("fitted from hub.json")
    assert "simulator" not in capsys.readouterr().err

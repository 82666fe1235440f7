"""Calibration: factors fitted from a profile reproduce its node times; the QNN CSV format parses."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hexfuse.graph_passes.cost import load_target
from hexfuse.graph_passes.cost.calibrate import (
    _unit_costs,
    fit_profile,
    model_nodes,
    node_ns,
    parse_profile,
    synthesize_profile,
)
from hexfuse.cli import main
from hexfuse.graph_passes.errors import HexfuseError
from tests.cost.specs import estimated

# The format written by onnxruntime-qnn 2.7.0 (HTP simulator), trimmed from a real run.
QNN_CSV = """Msg Timestamp,Message,Time,Unit of Measurement,Timing Source,Event Level,Event Identifier
0,FINALIZE,24636,US,BACKEND,ROOT,QNN (finalize) time
0,BACKEND,596159,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,8221,CYCLES,BACKEND,SUB-EVENT,Input OpId_2 (cycles)
0,NODE,20975,CYCLES,BACKEND,SUB-EVENT,Transpose_token_4:OpId_17 (cycles)
0,NODE,532591,CYCLES,BACKEND,SUB-EVENT,conv0_token_1:OpId_22 (cycles)
0,NODE,7700,CYCLES,BACKEND,SUB-EVENT,relu0:OpId_26 (cycles)
0,BACKEND,35604,US,BACKEND,ROOT,Accelerator (execute) time
0,BACKEND,3665135,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,3085,CYCLES,BACKEND,SUB-EVENT,Input OpId_2 (cycles)
0,NODE,529383,CYCLES,BACKEND,SUB-EVENT,conv0_token_1:OpId_22 (cycles)
0,NODE,4248,CYCLES,BACKEND,SUB-EVENT,relu0:OpId_26 (cycles)
0,BACKEND,3665135,CYCLES,BACKEND,ROOT,Accelerator (execute) time (cycles)
0,NODE,530000,CYCLES,BACKEND,SUB-EVENT,conv0_token_1:OpId_22 (cycles)
0,NODE,5000,CYCLES,BACKEND,SUB-EVENT,relu0:OpId_26 (cycles)
"""


def _model(path: Path) -> Path:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w0"),
        numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal((32, 1, 3, 3)).astype(np.float32), "wd"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c"], name="conv0", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu0"),
        helper.make_node("Conv", ["r", "wd"], ["d"], name="dw0", pads=[1, 1, 1, 1], group=32),
        helper.make_node("Sigmoid", ["d"], ["s"], name="sig0"),
        helper.make_node("Reshape", ["s", "shape"], ["flat"], name="view0"),
        helper.make_node("MatMul", ["flat", "w1"], ["m"], name="mm0"),
        helper.make_node("Softmax", ["m"], ["y"], name="softmax0", axis=-1),
        helper.make_node("Add", ["y", "m"], ["z"], name="add0"),
    ]
    inits.append(numpy_helper.from_array(np.array([512, 64], dtype=np.int64), "shape"))
    graph = helper.make_graph(nodes, "calib", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 32, 32])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [512, 64])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    onnx.save(model, path)
    return path


TRUE = {"conv": 1.7, "depthwise": 0.5, "transcendental": 2.2, "matmul": 0.8, "softmax": 1.3, "elementwise": 0.6}


def test_parse_qnn_profile_medians_per_node(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text(QNN_CSV)
    cycles, runs = parse_profile(path)
    assert runs == 3
    assert cycles["conv0_token_1"] == 530000  # median of three runs
    assert cycles["relu0"] == 5000
    assert "Input" in cycles and "Transpose_token_4" in cycles  # QNN's own nodes, skipped at matching


def test_round_trip_recovers_factors_and_costs(tmp_path):
    model = _model(tmp_path / "m.onnx")
    truth = load_target("sm8550").with_values(factors=TRUE)
    profile = tmp_path / "profile.csv"
    profile.write_text(synthesize_profile(model, truth))
    fit = fit_profile(profile, model, load_target("sm8550"))
    assert set(fit.nodes_used) == set(TRUE)
    for cls, value in TRUE.items():
        assert fit.factors[cls] == pytest.approx(value, rel=0.02), cls
    assert fit.skipped == ["Input", "Output"]
    # the fitted target predicts the profiled node times
    nodes = model_nodes(model)
    measured, _ = parse_profile(profile)
    for name, cost in _unit_costs(nodes, fit.target).items():
        label = next(key for key in measured if key == name or key.startswith(name + "_token_"))
        predicted = node_ns(cost, fit.target.with_values(factors={}), fit.target.factor(cost.op_class))
        assert predicted == pytest.approx(measured[label] / truth.clock_ghz, rel=0.01), name
    assert fit.residual < 0.01


def test_fit_moves_factors_away_from_the_base(tmp_path):
    model = _model(tmp_path / "m.onnx")
    slow = load_target("sm8550").with_values(factors={"conv": 3.0})
    profile = tmp_path / "profile.csv"
    profile.write_text(synthesize_profile(model, slow))
    fit = fit_profile(profile, model, load_target("sm8550"))
    assert fit.factors["conv"] == pytest.approx(3.0, rel=0.02)
    assert fit.factors["elementwise"] == pytest.approx(1.0, rel=0.02)
    assert not math.isclose(fit.factors["conv"], load_target("sm8550").factor("conv"))


def test_calibrate_command_writes_a_loadable_target(tmp_path, capsys):
    model = _model(tmp_path / "m.onnx")
    profile = tmp_path / "profile.csv"
    profile.write_text(synthesize_profile(model, load_target("sm8650").with_values(factors=TRUE)))
    out = tmp_path / "phone.json"
    assert main(["calibrate", str(profile), "--model", str(model), "--target", "v75", "-o", str(out)]) == 0
    fitted = load_target(out)
    assert fitted.name == "phone"
    assert fitted.factor("matmul") == pytest.approx(0.8, rel=0.02)
    assert "fitted from profile.csv" in json.loads(out.read_text())["factors"]["matmul"]["source"]
    assert "calibrated phone" in capsys.readouterr().err


def test_profile_of_another_model_is_an_error(tmp_path):
    model = _model(tmp_path / "m.onnx")
    profile = tmp_path / "p.csv"
    profile.write_text(QNN_CSV.replace("conv0", "other").replace("relu0", "nothing"))
    with pytest.raises(HexfuseError, match="no row matches a node of"):
        fit_profile(profile, model, load_target("sm8550"))
    empty = tmp_path / "e.csv"
    empty.write_text("a,b\n1,2\n")
    with pytest.raises(HexfuseError, match="not a QNN profiling CSV"):
        parse_profile(empty)


def _model_of_sizes(path: Path) -> Path:
    """MatMuls (HMX) and elementwise ops (HVX) of several sizes: per class, time = overheads + factor x size,
    so the overheads are what stays when the size goes to zero; only HVX ops pay the launch."""
    rng = np.random.default_rng(2)
    nodes, inits, outputs = [], [], []
    for i, n in enumerate((32, 128, 512)):
        inits.append(numpy_helper.from_array(rng.standard_normal((256, n)).astype(np.float32), f"w{i}"))
        nodes.append(helper.make_node("MatMul", ["x", f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}"))
        nodes.append(helper.make_node("Sigmoid", [f"r{i}"], [f"s{i}"], name=f"sig{i}"))
        outputs.append(helper.make_tensor_value_info(f"s{i}", TensorProto.FLOAT, [512, n]))
    graph = helper.make_graph(nodes, "sizes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [512, 256])],
                              outputs, inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_fit_recovers_dispatch_and_hvx_launch_costs(tmp_path):
    """The per-op constants that price entry merging come out of the profile, not the base's estimates."""
    model = _model_of_sizes(tmp_path / "m.onnx")
    base = estimated("sm8550")  # the overheads the truth differs from (the bundled target's are fitted now)
    truth = base.with_values(factors={"matmul": 0.8, "elementwise": 1.3, "transcendental": 2.0},
                             dispatch_ns=2600.0, hvx_launch_ns=700.0)
    profile = tmp_path / "profile.csv"
    profile.write_text(synthesize_profile(model, truth))
    assert (base.dispatch_ns, base.hvx_launch_ns) == (1500.0, 300.0)
    fit = fit_profile(profile, model, base)
    assert fit.target.dispatch_ns == pytest.approx(2600.0, rel=0.03)
    assert fit.target.hvx_launch_ns == pytest.approx(700.0, rel=0.05)
    for cls, value in truth.factors.items():
        assert fit.factors[cls] == pytest.approx(value, rel=0.03), cls
    assert fit.residual < 0.01
    assert "fitted from profile.csv" in fit.target.sources["dispatch_ns"]
    assert "on HVX threads" in fit.target.sources["hvx_launch_ns"]
    kept = fit_profile(profile, model, base, overheads=False)  # --keep-overheads: the factors absorb them
    assert kept.target.dispatch_ns == 1500.0 and kept.residual > fit.residual


def test_launch_cost_is_kept_when_the_profile_cannot_separate_it(tmp_path):
    """Only HMX nodes (no node runs on an HVX thread): dispatch_ns is fitted, hvx_launch_ns kept."""
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", f"w{i}"], [f"y{i}"], name=f"mm{i}") for i in range(3)]
    inits = [numpy_helper.from_array(rng.standard_normal((64, 32 * (i + 1))).astype(np.float32), f"w{i}") for i in range(3)]
    graph = helper.make_graph(nodes, "hmx_only", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 64])],
                              [helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [128, 32 * (i + 1)])
                               for i in range(3)], inits)
    model = tmp_path / "hmx.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    truth = estimated("sm8550").with_values(dispatch_ns=2000.0, hvx_launch_ns=900.0)
    profile = tmp_path / "p.csv"
    profile.write_text(synthesize_profile(model, truth))
    fit = fit_profile(profile, model, estimated("sm8550"))
    assert fit.target.hvx_launch_ns == 300.0 and "no nodes on HVX threads" in fit.overheads
    assert fit.target.dispatch_ns == pytest.approx(2000.0, rel=0.05)

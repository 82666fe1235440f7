"""A/B runs on the QNN EP's HTP backend (a simulator on x86) and op-package failure handling."""
from __future__ import annotations

import json

import pytest
from ab_testmodels import REFUSING_QNN_PACKAGE, fake_library, run_cli

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.ab import guards
from hexfuse.tools.ab import qnn_session as qs
from hexfuse.tools.ab.sessions import RunConfig

pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")


def test_qnn_sim_tiny_all_nodes_on_qnn(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    out = tmp_path / "q"
    assert run_cli(["ab", orig, fused, "--ep", "qnn", "--qnn-config", "htp_sim", "--iters", "6",
                    "--warmup", "1", "--profile-runs", "2", "-o", str(out)]) == 0
    err = capsys.readouterr().err  # every slow QNN step says so on stderr
    for step in ("creating session 1/2", "creating session 2/2", "first run of every session", "profiling 1/2",
                 "profiling 2/2", "report written"):
        assert f"hexfuse ab: {step}" in err, step
    rep = json.loads((out / "report.json").read_text())
    assert rep["ep"] == "qnn" and rep["simulator"] is True
    assert rep["equivalence"]["passed"]
    for key, a in rep["assignment"].items():
        assert a["all_on_qnn"], key
        assert a["nodes_per_ep"] == {"QNNExecutionProvider": 4}
    by_key = {b["key"]: b for b in rep["baselines"]}
    assert by_key["b2_original_best"]["available"]
    assert "no op package" in by_key["b4_fused_concurrent"]["reason"]
    assert not by_key["b1_original_seq"]["available"]
    prof = rep["profiles"]["b2_original_best"]
    assert prof["format"] == "qnn_csv" and prof["runs"] == 2 and (out / prof["file"]).is_file()
    names = [n["name"] for n in prof["nodes"]]
    assert {"mm0", "relu1", "softmax2", "add3", "Input", "Output"} <= set(names)
    assert all(n["cycles"] > 0 for n in prof["nodes"])
    assert rep["cycles"]["per_run"]["b2_original_best"]["accelerator_cycles"] > 0
    tl = rep["engines"]["b2_original_best"]
    assert tl["unit"] == "cycles" and tl["per_engine"]["matrix"]["ops"] == 1
    # serial HTP run: the MatMul branch was ready at t=0 but ran after other ops, or vice versa
    waited = sum(pe["idle_while_ready_work_waited"] for pe in tl["per_engine"].values())
    assert waited > 0 and tl["ideal_engine_parallel_span"] < tl["span"]


def test_qnn_device_preset_options_accepted_by_simulator(tiny_pair, tmp_path):
    """The v75 preset's option names and values are real: the simulator keeps every node on HTP."""
    orig, fused = tiny_pair
    out = tmp_path / "q75"
    assert run_cli(["ab", orig, fused, "--ep", "qnn", "--qnn-config", "htp_v75_burst", "--iters", "2",
                    "--warmup", "0", "--profile-runs", "1", "-q", "-o", str(out)]) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["qnn_preset"]["provider_options"]["htp_performance_mode"] == "burst"
    assert all(a["all_on_qnn"] for a in rep["assignment"].values())


def test_refusing_op_package_is_a_failure(tiny_pair, tmp_path, capsys):
    """The EP logs the failed registration and quietly runs everything on CPU: must not pass."""
    orig, fused = tiny_pair
    lib = fake_library(tmp_path, "HexFuseRefusing", REFUSING_QNN_PACKAGE)
    rc = run_cli(["ab", orig, fused, "--ep", "qnn", "--op-package", lib, "--iters", "2",
                  "--warmup", "0", "-q", "-o", str(tmp_path / "r")])
    assert rc == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("hexfuse: error: ")
    assert "op package did not claim fused op(s) ['HexFuse_g0']" in last and "CPUExecutionProvider=" in last
    assert not (tmp_path / "r" / "report.json").exists()


def test_refusing_op_package_with_fallback_disabled(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    cfg = tmp_path / "strict.json"
    cfg.write_text(json.dumps({"provider_options": {"backend_type": "htp"}, "disable_cpu_ep_fallback": True}))
    lib = fake_library(tmp_path, "HexFuseRefusing", REFUSING_QNN_PACKAGE)
    rc = run_cli(["ab", orig, fused, "--ep", "qnn", "--qnn-config", str(cfg), "--op-package", lib,
                  "--iters", "2", "--warmup", "0", "-q", "-o", str(tmp_path / "r")])
    assert rc == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("hexfuse: error: cannot create qnn session") and "fallback" in last


CFG = RunConfig("b4_fused_concurrent", "(4) fused", "f.onnx", "fused", "qnn")


def test_unclaimed_fused_node_detected():
    """Registration worked but the package did not take the node: the body shows up inlined."""
    inlined = qs.Assignment([{"ep": qs.QNN_EP, "name": n, "op_type": t, "domain": "", "subgraph": 0}
                             for n, t in [("a", "MatMul"), ("b", "Softmax"), ("c", "Relu")]])
    with pytest.raises(HexfuseError, match=r"did not claim fused op\(s\) \['HexFuse_g0'\]"):
        guards.check_claims(CFG, inlined, {"HexFuse_g0": 1}, qs.QNN_EP)
    on_cpu = qs.Assignment([{"ep": "CPUExecutionProvider", "name": "g", "op_type": "HexFuse_g0",
                             "domain": "hexfuse", "subgraph": 0}])
    with pytest.raises(HexfuseError, match="did not claim"):
        guards.check_claims(CFG, on_cpu, {"HexFuse_g0": 1}, qs.QNN_EP)
    claimed = qs.Assignment([{"ep": qs.QNN_EP, "name": "g", "op_type": "HexFuse_g0", "domain": "hexfuse",
                              "subgraph": 0}])
    guards.check_claims(CFG, claimed, {"HexFuse_g0": 1}, qs.QNN_EP)
    with pytest.raises(HexfuseError, match="did not claim"):
        guards.check_claims(CFG, claimed, {"HexFuse_g0": 2}, qs.QNN_EP)  # one of two nodes left unclaimed


def test_op_packages_option_one_entry_per_type():
    s = qs.op_packages_option(["HexFuse_a", "HexFuse_b"], "/x/libHexFuse.so", "HexFuse")
    assert s == ("HexFuse_a:/x/libHexFuse.so:HexFuseInterfaceProvider:CPU,"
                 "HexFuse_b:/x/libHexFuse.so:HexFuseInterfaceProvider:CPU")


def test_double_registration_guarded():
    first = qs.register_qnn()
    qs._registered = False  # as if another module had registered the plugin first
    assert len(qs.register_qnn()) == len(first) >= 1

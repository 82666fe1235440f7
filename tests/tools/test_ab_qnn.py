"""A/B runs on the QNN EP's HTP backend (a simulator on x86) and op-package failure handling."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from ab_testmodels import run_cli

from hexfuse.graph_passes.errors import HexfuseError
from hexfuse.tools.ab import qnn_session as qs

pytest.importorskip("onnxruntime_qnn", reason="onnxruntime-qnn (test extra) is not installed")


def test_qnn_sim_tiny_all_nodes_on_qnn(tiny_pair, tmp_path):
    orig, fused = tiny_pair
    out = tmp_path / "q"
    assert run_cli(["ab", orig, fused, "--ep", "qnn", "--qnn-config", "htp_sim", "--iters", "6",
                    "--warmup", "1", "--profile-runs", "2", "-q", "-o", str(out)]) == 0
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


def _fake_package(tmp_path: Path) -> str:
    """An ELF shared library that is not a QNN op package."""
    import ctypes.util
    src = ctypes.util.find_library("m")
    cands = [Path("/lib/x86_64-linux-gnu") / (src or "libm.so.6"), Path("/usr/lib/x86_64-linux-gnu/libm.so.6")]
    lib = next(p for p in cands if p.is_file())
    dst = tmp_path / "libHexFuseFake.so"
    shutil.copy(lib, dst)
    return str(dst)


def test_unregistrable_op_package_is_a_failure(tiny_pair, tmp_path, capsys):
    """The EP logs the failed registration and quietly runs everything on CPU: must not pass."""
    orig, fused = tiny_pair
    rc = run_cli(["ab", orig, fused, "--ep", "qnn", "--op-package", _fake_package(tmp_path), "--iters", "2",
                  "--warmup", "0", "-q", "-o", str(tmp_path / "r")])
    assert rc == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("hexfuse: error: ")
    assert "op package did not claim fused op(s) ['HexFuse_g0']" in last and "CPUExecutionProvider=" in last
    assert not (tmp_path / "r" / "report.json").exists()


def test_unregistrable_op_package_with_fallback_disabled(tiny_pair, tmp_path, capsys):
    orig, fused = tiny_pair
    cfg = tmp_path / "strict.json"
    cfg.write_text(json.dumps({"provider_options": {"backend_type": "htp"}, "disable_cpu_ep_fallback": True}))
    rc = run_cli(["ab", orig, fused, "--ep", "qnn", "--qnn-config", str(cfg), "--op-package",
                  _fake_package(tmp_path), "--iters", "2", "--warmup", "0", "-q", "-o", str(tmp_path / "r")])
    assert rc == 1
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last.startswith("hexfuse: error: cannot create qnn session") and "fallback" in last


def test_unclaimed_fused_node_detected():
    """Registration worked but the package did not take the node: the body shows up inlined."""
    inlined = qs.Assignment([{"ep": qs.QNN_EP, "name": n, "op_type": t, "domain": "", "subgraph": 0}
                             for n, t in [("a", "MatMul"), ("b", "Softmax"), ("c", "Relu")]])
    with pytest.raises(HexfuseError, match=r"did not claim fused op\(s\) \['HexFuse_g0'\]"):
        qs.check_claimed(inlined, {"HexFuse_g0": 1}, "f.onnx")
    on_cpu = qs.Assignment([{"ep": "CPUExecutionProvider", "name": "g", "op_type": "HexFuse_g0",
                             "domain": "hexfuse", "subgraph": 0}])
    with pytest.raises(HexfuseError, match="did not claim"):
        qs.check_claimed(on_cpu, {"HexFuse_g0": 1}, "f.onnx")
    claimed = qs.Assignment([{"ep": qs.QNN_EP, "name": "g", "op_type": "HexFuse_g0", "domain": "hexfuse",
                              "subgraph": 0}])
    qs.check_claimed(claimed, {"HexFuse_g0": 1}, "f.onnx")
    with pytest.raises(HexfuseError, match="did not claim"):
        qs.check_claimed(claimed, {"HexFuse_g0": 2}, "f.onnx")  # one of two nodes left unclaimed


def test_op_packages_option_one_entry_per_type():
    s = qs.op_packages_option(["HexFuse_a", "HexFuse_b"], "/x/libHexFuse.so", "HexFuse")
    assert s == ("HexFuse_a:/x/libHexFuse.so:HexFuseInterfaceProvider:CPU,"
                 "HexFuse_b:/x/libHexFuse.so:HexFuseInterfaceProvider:CPU")


def test_double_registration_guarded():
    first = qs.register_qnn()
    qs._registered = False  # as if another module had registered the plugin first
    assert len(qs.register_qnn()) == len(first) >= 1

"""The device path with an SDK: context binaries with the op package, and a bundle's run_ab.py on x86.

Needs the proprietary QNN SDK (QNN_SDK_ROOT, the release of onnxruntime-qnn's QNN) with libnative
(HEXAGON_SDK_ROOT or X86_LIBNATIVE_DIR), clang and onnxruntime-qnn; skipped otherwise (CI has no SDK).
On x86 the HTP backend is the simulator of the onnxruntime-qnn wheel: outputs and placement are real.
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
from hexfuse.graph_passes.spec.model import load_spec
from hexfuse.op_package.render import op_packages_option
from hexfuse.tools.ab.presets import load_preset
from tests.builders import unfolded_activation_target
from tests.htp_x86 import htp_x86_missing, last_json

ROOT = Path(__file__).resolve().parents[2]
CHECK = Path(__file__).with_name("device_ctx_check.py")
TIMEOUT = 900


pytestmark = pytest.mark.skipif(htp_x86_missing() is not None, reason=str(htp_x86_missing()))


def _hexfuse(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """In a subprocess: a QNN EP failure can abort the process, and package libraries of one name
    must not meet in one process."""
    return subprocess.run([sys.executable, "-m", "hexfuse", *args], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=cwd)


@pytest.mark.parametrize("name", ["googlenet", "gptj_block_qdq"])
def test_context_round_trip_with_the_package(name: str, tmp_path: Path) -> None:
    fused = tmp_path / f"{name}.fused.onnx"
    assert hexfuse_main(["fuse", str(ROOT / "models" / f"{name}.onnx"), "-o", str(fused), "--target",
                         unfolded_activation_target("sm8650"), "--allow-scalar", "--allow-merge-only", "--min-gain", "0", "--as-designed",
                         "--ignore-schedule"]) == 0
    # every fusable group: the context path is under test
    package = "HexFuseCtx" + "".join(part.title() for part in name.split("_"))
    pkg = tmp_path / "pkg"
    ctx = tmp_path / f"{name}.ctx.onnx"
    done = _hexfuse("compile", str(fused), "--package", str(pkg), "-o", str(ctx), "--target", "sm8650")
    assert done.returncode == 1 and "not found" in done.stderr  # no package folder yet
    assert hexfuse_main(["oppkg", str(fused), "-o", str(pkg), "--package-name", package]) == 0
    done = _hexfuse("compile", str(fused), "--package", str(pkg), "-o", str(ctx), "--target", "sm8650")
    assert done.returncode == 0, done.stderr[-3000:]
    spec = load_spec(str(fused.with_suffix(".hexfuse.json")))
    nodes = sum(len(op.instances or (op.node_name,)) for op in spec.fused_ops)
    assert f"{nodes} fused nodes claimed by the package" in done.stderr and "outputs identical" in done.stderr
    print(done.stderr.strip().splitlines()[-1])  # prepare and load times (pytest -s)
    library = next((pkg / "build" / "x86_64-linux-clang").glob("*.so"))
    option = op_packages_option(package, [op.op_type for op in spec.fused_ops], str(library))
    options = json.dumps(load_preset("htp_v75_burst").provider_options)
    check = subprocess.run([sys.executable, str(CHECK), str(ctx), str(fused), option, options],
                           capture_output=True, text=True, timeout=TIMEOUT)
    assert check.returncode == 0, check.stderr[-3000:]
    got = last_json(check.stdout)
    assert got["equal"] and got["ep_context_nodes"] == 1 and got["context_nodes"] == ["EPContext"], got
    # The binary names the package's ops: without the package registered QNN cannot restore the graph.
    assert "Failed to load from EpContext model" in got["without_package"], got


def test_context_of_the_original_and_embed_mode_0(tmp_path: Path) -> None:
    ctx = tmp_path / "g.ctx.onnx"
    done = _hexfuse("compile", str(ROOT / "models" / "googlenet.onnx"), "-o", str(ctx), "--embed-mode", "0",
                    "--target", "sm8650")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "g.ctx_qnn.bin").is_file() and sorted(p.name for p in tmp_path.iterdir()) == \
        ["g.ctx.onnx", "g.ctx_qnn.bin"], "only the context model and its binary; no staging left behind"
    options = json.dumps(load_preset("htp_v75_burst").provider_options)
    check = subprocess.run([sys.executable, str(CHECK), str(ctx), str(ROOT / "models" / "googlenet.onnx"), "-", options],
                           capture_output=True, text=True, timeout=TIMEOUT)
    assert check.returncode == 0 and last_json(check.stdout)["equal"], check.stderr[-2000:]
    again = _hexfuse("compile", str(ROOT / "models" / "googlenet.onnx"), "-o", str(ctx), "--target", "sm8650")
    assert again.returncode == 0 and "embedded" in again.stderr  # replaces the earlier context model


def test_bundle_run_script_on_the_simulator_imports_and_calibrates(tmp_path: Path) -> None:
    original = ROOT / "models" / "googlenet.onnx"
    fused = tmp_path / "g.fused.onnx"
    assert hexfuse_main(["fuse", str(original), "-o", str(fused), "--target", unfolded_activation_target("sm8650"),
                         "--allow-scalar", "--allow-merge-only", "--min-gain", "0", "--as-designed", "--ignore-schedule"]) == 0
    bundle = tmp_path / "bundle"
    done = _hexfuse("bundle", str(original), str(fused), "-o", str(bundle), "--target", "sm8650",
                    "--package-name", "HexFuseBundle")
    assert done.returncode == 0, done.stderr[-3000:]
    for key in ("b2_original_best", "b3_fused_serial", "b4_fused_concurrent", "fused_inlined"):
        assert (bundle / "contexts" / f"{key}.ctx.onnx").is_file(), key
    assert (bundle / "package/build/x86_64-linux-clang/libQnnHexFuseBundle.so").is_file()
    compiled = json.loads((bundle / "contexts" / "compile.json").read_text())["runs"]
    assert all(r["outputs_identical_to_preparing_run"] for r in compiled.values())
    fused_nodes = sum(1 for n in onnx.load(str(fused)).graph.node if n.domain == "hexfuse")
    assert fused_nodes and sum(compiled["b4_fused_concurrent"]["claimed"].values()) == fused_nodes
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-I", str(bundle / "run_ab.py"), "--iters", "3", "--warmup", "1",
                          "--profile-runs", "1"], capture_output=True, text=True, timeout=TIMEOUT, cwd=tmp_path, env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    results = json.loads((bundle / "results" / "results.json").read_text())
    assert results["form"] == "context" and results["platform"]["simulator"] is True
    assert [r["key"] for r in results["runs"]] == ["b2_original_best", "b3_fused_serial", "b4_fused_concurrent"]
    assert all(c["passed"] for c in results["device_check"].values())
    for level in ("detailed", "optrace"):
        for key in ("b2_original_best", "b4_fused_concurrent"):
            assert (bundle / "results" / "profiles" / level / key / "profile.csv").is_file()
    # prepared on this machine instead: the fused runs must claim every fused node; optrace keeps schematics
    onnx_run = subprocess.run([sys.executable, "-I", str(bundle / "run_ab.py"), "--from", "onnx", "--iters", "2",
                               "--warmup", "0", "--profile-runs", "1", "--levels", "optrace", "-o",
                               str(tmp_path / "res_onnx")], capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert onnx_run.returncode == 0, onnx_run.stderr[-3000:]
    assert list((tmp_path / "res_onnx" / "profiles" / "optrace" / "b4_fused_concurrent").glob("*_schematic.bin"))

    report = tmp_path / "report"
    imported = _hexfuse("ab", "--import", str(bundle / "results"), "-o", str(report))
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert "equivalence PASS" in imported.stderr and "x86 HTP simulator" in imported.stderr
    rep = json.loads((report / "report.json").read_text())
    assert {b["key"] for b in rep["baselines"] if b["available"]} == \
        {"b2_original_best", "b3_fused_serial", "b4_fused_concurrent"}
    assert "overlap_gain_3_to_4" in rep["speedups"] and rep["simulator"] is True
    assert rep["cycles"]["per_run"]["b4_fused_concurrent"]["accelerator_cycles"] > 0

    csv = bundle / "results" / "profiles" / "detailed" / "b2_original_best" / "profile.csv"
    refused = _hexfuse("calibrate", str(csv), "--model", str(bundle / "models" / "original.onnx"), "--target",
                       "sm8650", "-o", str(tmp_path / "cal.json"))
    assert refused.returncode == 1 and "comes from the HTP simulator" in refused.stderr
    allowed = _hexfuse("calibrate", str(report / "qnn_profile_b2_original_best.csv"), "--model",
                       str(bundle / "models" / "original.onnx"), "--target", "sm8650", "-o", str(tmp_path / "cal.json"),
                       "--allow-simulator")
    assert allowed.returncode == 0 and "warning" in allowed.stderr and (tmp_path / "cal.json").is_file()
